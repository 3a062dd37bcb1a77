"""CPU micro-benchmark of the cuda detector's callback hot path (not a test, no GPU).

    python bench/bench_callback.py [--out reports/cpu/callback-NAME.md] [--between-op 0,262144]

Drives ``CuptiHub._callback`` with a FAKE libcupti and ctypes-built ``CUpti_CallbackData``, as
tests/test_detect.py does, and prints the median cost in microseconds per callback (timeit, best
of several repeats). Two call paths:

* ``py``: ``hub._callback(...)`` called from Python: our Python work only.
* ``thunk``: through the ctypes CFUNCTYPE object CUPTI would call (argument conversion both ways,
  GIL released around the foreign call and re-taken by the thunk, as when torch released the GIL
  before the CUDA call). What CUPTI itself costs can only be measured on the GPU
  (bench/bench_overhead.py's split configurations).
* ``c``: the C callback (``_cuptifast``, where built), through its test entry ``fire`` (a C
  function called from Python that releases the GIL and calls the callback as CUPTI would).

The callbacks are fired from under N frames whose file lies in torch's directory (1: a torch op
called straight from the user's line; 12: a deep wrapper chain), so the walk to the user's frame
and the per-frame "is this internal" test run as in a real call. Each figure has the same firing
loop with a Python no-op callback subtracted.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import sys
import threading
import time
import timeit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402,F401  (torch's directory is what "internal" means)

from bench import emit  # noqa: E402
from syncguard.attribution import frames as attribution
from syncguard.detectors import routing  # noqa: E402
from syncguard.detectors.cuda import cupti as C  # noqa: E402
from tests.test_detect import FakeHub, FakeRegion  # noqa: E402  (the CPU tests' fake libcupti)


def _data(site, corr, params):
    """CUPTI's callback data for one call, pointing at ``params``, which it keeps alive."""
    d = C.CallbackData(callbackSite=site, correlationId=corr,
                       functionParams=ctypes.addressof(params))
    d.params = params  # not a field: only holds the parameters while the data lives
    return d


def merge_calls(hub, pairs: bool, n: int = 100) -> list:
    """What ``n`` merges fire at the C callback, as ``(domain, cbid, data)``: each an async H2D
    copy (ENTER and EXIT), and with ``pairs`` a stream sync after it (ENTER and EXIT), as torch
    2.8's merge makes them."""
    ids = {api: key for key, (api, *_) in hub.table.items()}
    copy = C.MemcpyAsyncParams(dst=0xd000, src=0x7000, count=4096, kind=1, stream=0)
    one = [(*ids["cudaMemcpyAsync"], _data(site, 1, copy)) for site in (C.API_ENTER, C.API_EXIT)]
    if pairs:
        sync = C.StreamParams(stream=0)
        one += [(*ids["cudaStreamSynchronize"], _data(site, 2, sync))
                for site in (C.API_ENTER, C.API_EXIT)]
    return one * n


def _internal_fire(depth: int):
    """fire(cb, calls): calls ``cb(*args)`` for each args tuple from under ``depth`` frames whose
    file name is inside torch's directory (internal to attribution), as torch's Python wrappers
    would sit between the user's line and the CUDA call."""
    tdir = os.path.dirname(os.path.abspath(torch.__file__))
    src = ("def fire(cb, calls, n=DEPTH):\n"
           "    if n > 1:\n        return fire(cb, calls, n - 1)\n"
           "    for a in calls:\n        cb(*a)\n").replace("DEPTH", str(depth))
    ns: dict = {}
    exec(compile(src, os.path.join(tdir, f"fake_internal_{depth}.py"), "exec"), ns)
    return ns["fire"]


def _long_function_frame(lines: int):
    """The frame of a function stopped after ``lines`` statements (a long test, or a long
    training script's main): what reading its line number costs, against its offset."""
    body = "".join(f"    x{i} = {i}\n" for i in range(lines))
    ns: dict = {"sys": sys}
    exec(compile(f"def long():\n{body}    return sys._getframe()\n", "long_user_code.py", "exec"), ns)
    return ns["long"]()


def scenarios(hub, depth, between=None):
    """name -> (callable firing the callbacks once, number of callbacks it fires). ``between``,
    when given, runs before every callback, in the measured loop and in its no-op baseline alike:
    a torch op there leaves the caches as a real op's C++ would before CUPTI calls us."""
    copy = C.MemcpyAsyncParams(dst=0x1000, src=0x2000, count=4, kind=1, stream=0)
    d2d = C.MemcpyAsyncParams(dst=0x1000, src=0x3000, count=4, kind=3, stream=0)
    sync = C.StreamParams(stream=0)
    keep = [copy, d2d, sync]
    ce, cx = _data(C.API_ENTER, 1, copy), _data(C.API_EXIT, 1, copy)
    se, sx = _data(C.API_ENTER, 2, sync), _data(C.API_EXIT, 2, sync)
    de, dx = _data(C.API_ENTER, 2, sync), _data(C.API_EXIT, 2, sync)
    ke, kx = _data(C.API_ENTER, 3, d2d), _data(C.API_EXIT, 3, d2d)
    keep += [ce, cx, se, sx, de, dx, ke, kx]
    a = {k: ctypes.addressof(v)
         for k, v in dict(ce=ce, cx=cx, se=se, sx=sx, de=de, dx=dx, ke=ke, kx=kx).items()}
    fire = _internal_fire(depth)
    calls = {"copy ENTER+EXIT": [(None, 2, 41, a["ce"]), (None, 2, 41, a["cx"])],
             "D2D copy ENTER+EXIT": [(None, 2, 41, a["ke"]), (None, 2, 41, a["kx"])],
             "sync ENTER+EXIT, driver call nested": [
                 (None, 2, 131, a["se"]), (None, 1, 126, a["de"]), (None, 1, 126, a["dx"]),
                 (None, 2, 131, a["sx"])],
             # torch 2.8's merge: a pageable copy and the stream sync torch makes after it, from
             # one line (one blocking copy; the C callback has the sync ride on the copy)
             "copy then stream sync, one line, ENTER+EXIT each, driver call nested under the sync": [
                 (None, 2, 41, a["ce"]), (None, 2, 41, a["cx"]), (None, 2, 131, a["se"]),
                 (None, 1, 126, a["de"]), (None, 1, 126, a["dx"]), (None, 2, 131, a["sx"])],
             "id not enabled (table miss)": [(None, 2, 999, a["ce"])]}
    out = {}
    paths = [("py", hub._callback, False), ("thunk", hub._cb, False)]
    if hub.fast is not None:  # the C callback, called as CUPTI would (GIL released around it)
        paths.append(("c", hub.fast.fire, True))
    for path, cb, c_args in paths:
        noop = _noop
        if between is not None:
            cb = (lambda *a, _cb=cb: (between(), _cb(*a)))
            noop = (lambda *a: (between(), None))
        for name, c in calls.items():
            if c_args:  # fire(domain, cbid, data): no userdata argument
                c = [a[1:] for a in c]
            out[f"{path}: {name}"] = (lambda cb=cb, c=c: fire(cb, c), len(c),
                                      lambda c=c, noop=noop: fire(noop, c))
    return out, keep


@contextlib.contextmanager
def _fake_cudart(memory_type: int):
    """hostmem's libcudart swapped for a fake that answers every pointer query with
    ``memory_type`` (0 unregistered host memory: pageable; 1 cudaMemoryTypeHost: pinned), and no
    stream capturing: for the exit measurements only, restored after."""
    from syncguard.detectors.cuda import hostmem

    @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    def attributes(attr, ptr):
        ctypes.c_int.from_address(attr).value = memory_type
        return 0

    @ctypes.CFUNCTYPE(ctypes.c_int)
    def last_error():
        return 0

    class FakeCudart:
        cudaPointerGetAttributes, cudaGetLastError = attributes, last_error

    saved = hostmem._load_cudart, torch.cuda.is_current_stream_capturing
    hostmem._load_cudart, torch.cuda.is_current_stream_capturing = (lambda: FakeCudart), (lambda: False)
    try:
        yield
    finally:
        hostmem._load_cudart, torch.cuda.is_current_stream_capturing = saved


def _c_calls(hub, calls) -> list:
    """The observations the C callback hands a region for ``calls`` ((cbid, params) in order,
    each fired ENTER then EXIT from one line, so that a copy and its sync share a site):
    ``_cuptifast.Call`` objects, as a real region's exit sees them (a copy and the stream sync
    after it are one, where the C callback joins them)."""
    region, keep = FakeRegion(), []
    token = routing.regions.set((region,))
    try:
        for cbid, params in calls:
            for site in (C.API_ENTER, C.API_EXIT):
                data = _data(site, len(keep), params)
                keep.append(data)
                hub.fast.fire(2, cbid, ctypes.addressof(data))
    finally:
        routing.regions.reset(token)
    # (fewer where a stream sync rode on the copy before it: one Call for the pair)
    assert hub.fast.errors() == 0 and 0 < len(region.observations) <= len(calls)
    return region.observations


def _tuple_calls(calls, site) -> list:
    """The same calls as the Python callback builds them: ``CudaCall`` tuples."""
    from syncguard.detectors.cuda.calls import CudaCall

    out = []
    for i, (cbid, p) in enumerate(calls):
        if cbid == 41:
            out.append(CudaCall("cudaMemcpyAsync", "copy", None, "h2d", True, (i,), p.stream or 0,
                                site, "run", "MainThread", (), 3.0, p.count, p.src, p.dst))
        else:
            kind, api = ("device_sync", "cudaDeviceSynchronize") if cbid == 165 else (
                "stream_sync", "cudaStreamSynchronize")
            out.append(CudaCall(api, "sync", kind, None, False, (i,), None if cbid == 165 else 0,
                                site, "run", "MainThread", (), 5.0))
    return out


def _observations(hub, calls, objects: str) -> list:
    from syncguard.attribution.frames import Site

    if objects == "Call":
        return _c_calls(hub, calls)
    return _tuple_calls(calls, Site("user.py", 3, "f", ("user.py:3 in f",)))


def _exit_per_copy(hub, objects: str, copies: int = 100, blocks: int = 1) -> float:
    """µs per copy that a region's exit spends judging ``copies`` async H2D copies (as 100
    sync-free merges leave them: one pinned host block; ``blocks`` > 1: from that many, in
    turn) and a final device sync: the pageable-or-pinned records (one pointer query per block,
    answered by a fake libcudart here) and the pairing, as the detector's exit runs them
    (``combine_by_pointer``: with the C module, the pinned copies no sync pairs are passed over
    in C). ``objects``: the observations as the C callback makes them (``Call``) or as the Python
    one does (``CudaCall``)."""
    from syncguard.detectors.cuda.detector import combine_by_pointer

    calls = [(41, C.MemcpyAsyncParams(dst=0xd000 + i, src=0x7000 + 0x100 * (i % blocks),
                                      count=33048, kind=1, stream=0))
             for i in range(copies)] + [(165, C.StreamParams(stream=0))]
    obs = _observations(hub, calls, objects)
    number = max(1, 20_000 // copies)
    with _fake_cudart(1):
        run = lambda: combine_by_pointer(obs, hub.fast)  # noqa: E731
        assert [e.kind for e, _, _ in run()[0]] == ["device_sync"]
        return min(timeit.repeat(run, number=number, repeat=7)) / number / copies * 1e6


def _exit_per_event(hub, objects: str, pairs: int = 100) -> float:
    """µs per event that a region's exit spends on ``pairs`` pageable H2D copies each followed by
    a stream sync from the same line (as 100 merges with a CPU mask make on torch 2.8: each pair
    is one blocking copy, one event): the pointer query (a fake libcudart: pageable), the pairing
    and the event each pair becomes, and the region's judgement of the events. ``objects``: as in
    :func:`_exit_per_copy`."""
    from syncguard.detectors.cuda.detector import combine_by_pointer
    from syncguard.regions.region import Region

    calls = []
    for _ in range(pairs):
        calls += [(41, C.MemcpyAsyncParams(dst=0xd000, src=0x7000, count=33048, kind=1, stream=0)),
                  (131, C.StreamParams(stream=0))]
    obs = _observations(hub, calls, objects)
    region = Region(("cuda",))

    def run():
        events, _ = combine_by_pointer(obs, hub.fast)
        region.report.syncs.clear()
        region._judge(events)
        return events

    with _fake_cudart(0):
        assert [e.kind for e, _, _ in run()] == ["blocking_copy_h2d"] * pairs
        return min(timeit.repeat(run, number=100, repeat=7)) / 100 / pairs * 1e6


_FAKE_CUPTI_C = """
int cuptiSubscribe(void **h, void *cb, void *ud) { *h = (void *)0x5ca1ab1e; return 0; }
int cuptiEnableCallback(unsigned on, void *h, int domain, unsigned cbid) { return 0; }
int cuptiUnsubscribe(void *h) { return 0; }
"""


def _c_stand_in():
    """A libcupti stand-in in C (compiled here with cc): subscribe, enable and unsubscribe that
    do nothing, so a region's entry and exit run our own code through the same calls as on the
    GPU (ctypes or the C module), with CUPTI's own cost left out."""
    import subprocess
    import tempfile

    d = tempfile.mkdtemp(prefix="fake_cupti_")
    src, so = os.path.join(d, "fake_cupti.c"), os.path.join(d, "libfake_cupti.so")
    with open(src, "w") as fh:
        fh.write(_FAKE_CUPTI_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", so, src], check=True)
    lib = ctypes.CDLL(so)
    lib.cuptiSubscribe.argtypes = [ctypes.POINTER(ctypes.c_void_p), C.CALLBACK, ctypes.c_void_p]
    lib.cuptiUnsubscribe.argtypes = [ctypes.c_void_p]
    lib.cuptiEnableCallback.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    return lib


@contextlib.contextmanager
def _stand_in_hub():
    """The cuda detector's hub over the C stand-in for libcupti, with one callback id per API the
    detector watches (37; the H200's CUDA 13 table has 45 with the versioned ids), in place of
    the real hub while the block runs (and CUDA "set up": a CPU build); yields it."""
    from syncguard import detectors as registry
    from syncguard.detectors.cuda.calls import DRIVER_APIS, RUNTIME_APIS

    hub = FakeHub()
    hub.lib.lib = _c_stand_in()
    hub.table = {(2, 100 + i): (n,) + v for i, (n, v) in enumerate(RUNTIME_APIS.items())}
    hub.table.update({(1, 100 + i): (n,) + v for i, (n, v) in enumerate(DRIVER_APIS.items())})
    hub.use_fast()
    det = registry.get("cuda")
    saved = det.hub, torch.cuda.is_initialized
    det.hub, torch.cuda.is_initialized = hub, (lambda: True)
    try:
        yield hub
    finally:
        det.hub, torch.cuda.is_initialized = saved


def _region_enter_exit() -> float:
    """µs per empty ``audit(("cuda",))`` region, entered and left: the region's, the hub's and
    the detector's own work, over :func:`_stand_in_hub`."""
    import syncguard

    def region():
        with syncguard.audit(("cuda",)):
            pass
    with _stand_in_hub() as hub:
        with syncguard.audit(("cuda",)) as rep:
            pass
        assert rep.detectors == ("cuda",) and not hub.subscribed, (rep.detectors, rep.notes)
        return min(timeit.repeat(region, number=500, repeat=9)) / 500 * 1e6


def _region_cold(rounds: int = 121, pairs: bool = False) -> tuple[float, float]:
    """µs to enter and to leave an ``audit(("cuda",))`` region with caches cold, as on the H200's
    host after 100 merges (its overhead benchmark measured a region's entry and exit ~10x its
    warm figure): before entering, and again before leaving, a 32 MB tensor is rewritten and
    20,000 strings are made. Inside, the C callback gets 100 async H2D copies from one pinned
    block and a device sync, as 100 sync-free merges make them; a fake libcudart says pinned.
    ``pairs``: each copy from pageable memory and followed by a stream sync, as torch 2.8's 100
    merges make them (100 events at exit; the last region's report, freed as the next one is
    entered, held as many). Over :func:`_stand_in_hub`. Medians over ``rounds``, the first 10
    left out."""
    import statistics

    import syncguard

    big = torch.zeros(8_000_000)

    def thrash():
        big.add_(1)
        return [str(i) for i in range(20000)]

    enter, leave = [], []
    with _stand_in_hub() as hub, _fake_cudart(0 if pairs else 1):
        if hub.fast is None:
            return float("nan"), float("nan")
        ids = {api: key for key, (api, *_) in hub.table.items()}
        calls = merge_calls(hub, pairs)
        calls += [(*ids["cudaDeviceSynchronize"], C.CallbackData(callbackSite=site, correlationId=2))
                  for site in (C.API_ENTER, C.API_EXIT)]
        fired = [(d, cbid, ctypes.addressof(data)) for d, cbid, data in calls]
        for i in range(rounds):
            thrash()
            t0 = time.perf_counter()
            region = syncguard.audit(("cuda",))
            report = region.__enter__()
            t1 = time.perf_counter()
            for args in fired:
                hub.fast.fire(*args)
            thrash()
            t2 = time.perf_counter()
            region.__exit__(None, None, None)
            t3 = time.perf_counter()
            assert [e.kind for e in report.syncs] == (
                ["blocking_copy_h2d"] * 100 if pairs else []) + ["device_sync"], report.syncs
            if i >= 10:
                enter.append((t1 - t0) * 1e6)
                leave.append((t3 - t2) * 1e6)
    return statistics.median(enter), statistics.median(leave)


def _noop(*args):
    return None


def measure(fn, calls, baseline, number=2000, repeat=15) -> float:
    """µs per callback, less the same firing loop with a Python no-op callback."""
    fn(), baseline()
    t = min(timeit.repeat(fn, number=number, repeat=repeat))
    b = min(timeit.repeat(baseline, number=number, repeat=repeat))
    return (t - b) / number / calls * 1e6


def run(depth: int, between=None) -> list[tuple[str, float]]:
    from syncguard.detectors.cuda.calls import RUNTIME_APIS

    hub = FakeHub()
    hub.table[(2, 165)] = ("cudaDeviceSynchronize",) + RUNTIME_APIS["cudaDeviceSynchronize"]
    hub.use_fast()  # the C callback too, where it is built (else hub.fast stays None)
    region = FakeRegion()
    hub.acquire(region)
    rows = []
    try:
        cases, _keep = scenarios(hub, depth, between)
        token = routing.regions.set((region,))
        try:
            for name, (fn, calls, base) in cases.items():
                rows.append((f"in a region: {name}", measure(fn, calls, base)))
                region.observations.clear()
        finally:
            routing.regions.reset(token)
        for name, (fn, calls, base) in cases.items():  # a thread with no region
            if "miss" not in name:
                rows.append((f"no region: {name}", measure(fn, calls, base)))
        fire = _internal_fire(depth)
        one = [(0,)]
        rows.append(("piece: site_and_phase (walk + Site)", measure(
            lambda: fire(lambda _: attribution.site_and_phase(sys._getframe(1)), one), 1,
            lambda: fire(lambda _: sys._getframe(1), one))))
        long = _long_function_frame(2000)
        rows.append(("piece: frame.f_lineno, frame at the end of a 2,000-line function",
                     measure(lambda: long.f_lineno, 1, _noop)))
        rows.append(("piece: frame.f_lasti, the same frame", measure(lambda: long.f_lasti, 1, _noop)))
        rows.append(("piece: routing.regions.get()", measure(routing.regions.get, 1, _noop)))
        for objects in ("CudaCall", "Call") if hub.fast is not None else ("CudaCall",):
            made = "C callback's Call" if objects == "Call" else "Python callback's CudaCall"
            rows.append((f"piece: region exit per kept copy (host-memory query + combine, 100 "
                         f"async copies from one pinned block; {made})", _exit_per_copy(hub, objects)))
            if objects == "Call":  # the pointer question's scale: thousands of distinct blocks
                rows.append((f"piece: region exit per kept copy (host-memory query + combine, "
                             f"20,000 async copies, each from its own pinned block; {made})",
                             _exit_per_copy(hub, objects, 20_000, 20_000)))
            rows.append((f"piece: region exit per sync event (100 pageable H2D copies, each "
                         f"paired with a stream sync: pointer query, pairing, events, judgement; "
                         f"{made})", _exit_per_event(hub, objects)))
        rows.append(("piece: an empty audit(cuda) region, entered and left (per region; a C "
                     "stand-in for libcupti)", _region_enter_exit()))
        cold_enter, cold_exit = _region_cold()
        rows.append(("piece: a region with 100 pinned copies and a sync, caches cold: entering "
                     "(per region; the C callback, a C stand-in for libcupti)", cold_enter))
        rows.append(("piece: a region with 100 pinned copies and a sync, caches cold: leaving "
                     "(per region; the C callback, a C stand-in for libcupti)", cold_exit))
        cold_enter, cold_exit = _region_cold(pairs=True)
        rows.append(("piece: a region with 100 pageable copies, each with its stream sync, caches "
                     "cold: entering (per region, the last one's 100 events freed in it; the C "
                     "callback, a C stand-in for libcupti)", cold_enter))
        rows.append(("piece: a region with 100 pageable copies, each with its stream sync, caches "
                     "cold: leaving (per region, its 100 events made; the C callback, a C "
                     "stand-in for libcupti)", cold_exit))
        rows.append(("piece: threading.current_thread().name",
                     measure(lambda: threading.current_thread().name, 1, _noop)))
    finally:
        hub.release(region)
    assert hub.errors == 0 and (hub.fast is None or hub.fast.errors() == 0), hub.errors
    return rows


def _read_runs(paths) -> dict:
    """name -> [per-column values of one run] for each given result file of this script."""
    rows: dict = {}
    for p in paths:
        with open(p) as fh:
            for line in fh:
                if line.startswith("| ") and not line.startswith("| path"):
                    cells = [c.strip() for c in line.strip().strip("|").split("|")]
                    rows.setdefault(cells[0], []).append([float(v) for v in cells[1:]])
    return rows


def compare(before, after, out, labels=("before", "after")) -> None:
    """One before/after table from alternating runs of two versions (minimum per cell), and the
    cold rows' medians over the runs (the host's state moves those by up to 3x from run to run,
    where a minimum can land on one quiet moment)."""
    import statistics

    runs_b, runs_a = _read_runs(before), _read_runs(after)
    b = {k: [min(col) for col in zip(*v)] for k, v in runs_b.items()}
    a = {k: [min(col) for col in zip(*v)] for k, v in runs_a.items()}
    md = ["# cuda detector callback cost per callback on the CPU, before and after", "",
          f"before: {labels[0]}; after: {labels[1]}.", "",
          f"`bench/bench_callback.py`, the two versions run alternately ({len(before)} + "
          f"{len(after)} runs) on a shared 2-core machine; each cell is the minimum over the runs, in "
          "µs per callback (a copy or sync is ENTER+EXIT = 2 callbacks; the nested-sync row is 4). "
          "`py`: our Python only; `thunk`: through the ctypes CFUNCTYPE with the GIL released and "
          "re-taken, as when CUPTI calls us. N frames: torch-like frames between the user's line "
          "and the CUDA call.", "",
          "| path | before, 1 frame | after, 1 frame | before, 12 frames | after, 12 frames |",
          "|---|---|---|---|---|"]
    # a row matches its own name, else the text before its parenthesis (a renamed function inside
    # it is the same row), when only one row of the other version has that text (rows that
    # differ only inside it, such as the Call and CudaCall ones, are not the same row)
    def stem(k):
        return k.split(" (")[0]

    stems: dict = {}
    for k in b:
        stems.setdefault(stem(k), []).append(k)
    pairs = []
    for k, v in a.items():
        old = k if k in b else (stems[stem(k)][0] if len(stems.get(stem(k), ())) == 1 else None)
        if old is not None:
            pairs.append((old, k))
            md.append(f"| {k} | {b[old][0]:.2f} | {v[0]:.2f} | {b[old][1]:.2f} | {v[1]:.2f} |")
    cold = [(old, k) for old, k in pairs if "caches cold" in k]
    if cold:
        md += ["", "The cold rows again, each cell the median over the runs:", "",
               "| path | before, 1 frame | after, 1 frame | before, 12 frames | after, 12 frames |",
               "|---|---|---|---|---|"]
        for old, k in cold:
            mb = [statistics.median(col) for col in zip(*runs_b[old])]
            ma = [statistics.median(col) for col in zip(*runs_a[k])]
            md.append(f"| {k} | {mb[0]:.2f} | {ma[0]:.2f} | {mb[1]:.2f} | {ma[1]:.2f} |")
    with open(out, "w") as fh:
        fh.write("\n".join(md) + "\n")
    print("\n".join(md))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE_GLOB", "AFTER_GLOB"),
                    help="write --out as a before/after table from earlier runs' result files")
    ap.add_argument("--labels", metavar="BEFORE,AFTER",
                    help="with --compare: what the two versions are (commits), printed in the table")
    ap.add_argument("--frames", default="1,12",
                    help="internal (torch-like) frames between the user's line and the callback: "
                         "1 is a torch op called from the user's line, 12 a deep nn.Module chain")
    ap.add_argument("--between-op", default="0", metavar="N[,N...]",
                    help="before every callback run torch's add_ over N float32 elements (in the "
                         "baseline too): the callback then starts with caches as a real op leaves "
                         "them; 0: back to back, caches warm; several: one column each, side by "
                         "side in one run (default: 0)")
    a = ap.parse_args()
    if a.compare:
        import glob
        compare(sorted(glob.glob(a.compare[0])), sorted(glob.glob(a.compare[1])), a.out,
                tuple(a.labels.split(",", 1)) if a.labels else ("before", "after"))
        return
    depths = [int(x) for x in a.frames.split(",")]
    ops = [int(x) for x in a.between_op.split(",")]
    if any(n < 0 for n in ops):
        ap.error(f"--between-op: element counts must be >= 0, got {a.between_op!r}")

    def between(n):
        if not n:
            return None
        t = torch.zeros(n)
        return lambda: t.add_(1)

    heads = [(d, n) for n in ops for d in depths]
    cols = [dict(run(d, between(n))) for d, n in heads]
    md = [f"# cuda detector callback cost on the CPU (fake libcupti) · python {sys.version.split()[0]}"
          f" · torch {torch.__version__} · µs per callback, best of 15 repeats of 2,000", "",
          "| path | " + " | ".join(f"{d} internal frame(s), " + (
              f"add_ over {n} floats before each callback" if n else "back to back")
              for d, n in heads) + " |",
          "|---|" + "---|" * len(heads)]
    md += [f"| {n} | " + " | ".join(f"{c[n]:.2f}" for c in cols) + " |" for n in cols[0]]
    emit(md, a.out)


if __name__ == "__main__":
    main()
