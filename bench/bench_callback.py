"""CPU micro-benchmark of the cuda detector's callback hot path (not a test, no GPU).

    python bench/bench_callback.py [--out reports/cpu/callback-NAME.md]

Drives ``CuptiHub._callback`` with a FAKE libcupti and ctypes-built ``CUpti_CallbackData``, as
tests/test_detect.py does, and prints the median cost in microseconds per callback (timeit, best
of several repeats). Two call paths:

* ``py``: ``hub._callback(...)`` called from Python: our Python work only.
* ``thunk``: through the ctypes CFUNCTYPE object CUPTI would call (argument conversion both ways,
  GIL released around the foreign call and re-taken by the thunk, as when torch released the GIL
  before the CUDA call). What CUPTI itself costs can only be measured on the GPU
  (bench/bench_overhead.py's split configurations).

The user's frame sits under ``frames`` extra internal-looking frames (a torch-like call chain),
so the stack walk and the per-frame "is this internal" test are exercised as in a real call.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import threading
import timeit
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402,F401  (torch's directory is what "internal" means)

from syncguard import attribution, routing  # noqa: E402
from syncguard.detectors import cupti as C  # noqa: E402
from syncguard.detectors.cuda import DRIVER_APIS, RUNTIME_APIS, CuptiHub  # noqa: E402


class _FakeLib:
    def __getattr__(self, name):
        return lambda *a: 0


class FakeHub(CuptiHub):
    """A hub over a fake libcupti with the three callback ids the CPU tests use."""

    def __init__(self):
        super().__init__()
        self.lib = types.SimpleNamespace(lib=_FakeLib(), path="fake", error_name=str,
                                         check=lambda code, what: None)
        self.table = {(2, 41): ("cudaMemcpyAsync",) + RUNTIME_APIS["cudaMemcpyAsync"],
                      (2, 131): ("cudaStreamSynchronize",) + RUNTIME_APIS["cudaStreamSynchronize"],
                      (1, 126): ("cuStreamSynchronize",) + DRIVER_APIS["cuStreamSynchronize"]}

    def unavailable(self):
        return None


class FakeRegion:
    def __init__(self):
        self.observations, self.state = [], {}
        self.report = types.SimpleNamespace(notes=[])


def _data(site, corr, params):
    return C.CallbackData(callbackSite=site, correlationId=corr,
                          functionParams=ctypes.addressof(params))


def scenarios(hub):
    """name -> (callable firing the callbacks once, number of callbacks it fires)."""
    copy = C.MemcpyAsyncParams(dst=0x1000, src=0x2000, count=4, kind=1, stream=0)
    sync = C.StreamParams(stream=0)
    keep = [copy, sync]
    ce, cx = _data(C.API_ENTER, 1, copy), _data(C.API_EXIT, 1, copy)
    se, sx = _data(C.API_ENTER, 2, sync), _data(C.API_EXIT, 2, sync)
    de, dx = _data(C.API_ENTER, 2, sync), _data(C.API_EXIT, 2, sync)
    keep += [ce, cx, se, sx, de, dx]
    a = {k: ctypes.addressof(v) for k, v in dict(ce=ce, cx=cx, se=se, sx=sx, de=de, dx=dx).items()}
    out = {}
    for path, cb in (("py", hub._callback), ("thunk", hub._cb)):
        out[f"{path}: copy ENTER+EXIT"] = (lambda cb=cb: (cb(None, 2, 41, a["ce"]),
                                                          cb(None, 2, 41, a["cx"])), 2)
        out[f"{path}: sync ENTER+EXIT, driver call nested"] = (lambda cb=cb: (
            cb(None, 2, 131, a["se"]), cb(None, 1, 126, a["de"]), cb(None, 1, 126, a["dx"]),
            cb(None, 2, 131, a["sx"])), 4)
        out[f"{path}: id not enabled (table miss)"] = (lambda cb=cb: cb(None, 2, 999, a["ce"]), 1)
    return out, keep


def nest(depth, fn):
    """Call fn under ``depth`` frames whose file name looks like torch's (internal)."""
    tdir = os.path.dirname(os.path.abspath(torch.__file__))
    src = "def f(n, fn):\n    return f(n - 1, fn) if n else fn()\n"
    ns: dict = {}
    exec(compile(src, os.path.join(tdir, "fake_internal_frame.py"), "exec"), ns)
    return ns["f"](depth, fn)


def measure(fn, calls, number=2000, repeat=7) -> float:
    t = timeit.repeat(fn, number=number, repeat=repeat)
    return min(t) / number / calls * 1e6


def run(frames: int) -> list[tuple[str, float]]:
    hub = FakeHub()
    region = FakeRegion()
    hub.acquire(region)
    rows = []
    try:
        cases, _keep = scenarios(hub)
        token = routing.regions.set((region,))
        try:
            for name, (fn, calls) in cases.items():
                us = nest(frames, lambda: measure(fn, calls))
                region.observations.clear()
                rows.append((f"in a region: {name}", us))
        finally:
            routing.regions.reset(token)
        for name, (fn, calls) in cases.items():  # a thread with no region
            if "copy" in name or "sync" in name:
                rows.append((f"no region: {name}", nest(frames, lambda: measure(fn, calls))))
        # the pieces, alone
        f = sys._getframe()
        rows.append(("piece: site_and_phase (walk + Site)",
                     nest(frames, lambda: measure(lambda: attribution.site_and_phase(sys._getframe()), 1))))
        rows.append(("piece: routing.regions.get()", measure(routing.regions.get, 1)))
        rows.append(("piece: threading.current_thread().name",
                     measure(lambda: threading.current_thread().name, 1)))
        del f
    finally:
        hub.release(region)
    assert hub.errors == 0, hub.errors
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--frames", type=int, default=12, help="internal frames above the callback")
    a = ap.parse_args()
    rows = run(a.frames)
    md = [f"# cuda detector callback cost on the CPU (fake libcupti) · python {sys.version.split()[0]}"
          f" · torch {torch.__version__} · {a.frames} internal frames · µs per callback, best of 7",
          "", "| path | µs/callback |", "|---|---|"]
    md += [f"| {n} | {us:.2f} |" for n, us in rows]
    text = "\n".join(md) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
