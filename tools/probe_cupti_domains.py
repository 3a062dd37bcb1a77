"""Probe (GPU, not a test): what CUPTI's own dispatch costs per domain of the detector's ids.

    python tools/probe_cupti_domains.py [--rounds 96] [--out DIR]

Why: at 36def12 the default detector's 100 merges cost, inside the region, what a C no-op
callback subscribed on the same ids costs (reports/probes/cuda-detector.md, last section): CUPTI's
dispatch, not syncguard's work. The detector enables each sync and copy API at both levels, the
runtime's and the driver's, and a runtime call fires the driver call's callbacks under it too
(torch 2.8.0's merge: four calls, eight callbacks). Would the driver's ids alone, or the
runtime's alone, cost less, and by how much?

A C no-op callback (libc's ``abs``) is subscribed around each loop, with no region, on: every id
of the detector (runtime and driver), the driver's ids only, the runtime's ids only, or none.
Workloads: 100 merges (torch >= 2.9: one async copy each; 2.8: a copy and a stream sync) and
2,000 tiny kernels (no id of the detector fires). Rounds follow bench/design.py's Williams
design; each cell is the median over rounds of the loop's time over the bare loop of the same
round, printed and written to DIR/cupti-domains-<torch>.{json,md}.
"""
import contextlib
import ctypes
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree

import torch  # noqa: E402

from bench import emit_doc, gpu_probe_args  # noqa: E402

from bench.design import round_order, whole_cycles  # noqa: E402
from bench.workloads import mask_merges, merge_state, tiny_kernels  # noqa: E402
from syncguard.detectors.cuda import cupti as C  # noqa: E402
from syncguard.detectors.cuda.detector import HUB  # noqa: E402


def subscribed(domains):
    """A C no-op callback subscribed on the detector's ids of ``domains`` around the block."""
    lib = HUB.lib.lib
    cb = ctypes.cast(ctypes.CDLL(None).abs, C.CALLBACK)
    ids = [(d, cbid) for d, cbid in HUB.table if d in domains]

    @contextlib.contextmanager
    def cm():
        handle = ctypes.c_void_p()
        HUB.lib.check(lib.cuptiSubscribe(ctypes.byref(handle), cb, None), "subscribe")
        try:
            for d, cbid in ids:
                HUB.lib.check(lib.cuptiEnableCallback(1, handle, d, cbid), "enable")
            yield
        finally:
            for d, cbid in ids:
                lib.cuptiEnableCallback(0, handle, d, cbid)
            lib.cuptiUnsubscribe(handle)
    return cm, len(ids)


@contextlib.contextmanager
def bare():
    yield


def main():
    a = gpu_probe_args(96)
    st = merge_state()
    st["y"] = torch.zeros(16, device="cuda")
    workloads = {"100 merges": lambda: mask_merges(st, 100),
                 "2000 tiny kernels": lambda: tiny_kernels(st, 2000)}
    configs, counts = {"bare": bare}, {}
    for name, domains in (("runtime and driver ids (the detector's)",
                           (C.DOMAIN_RUNTIME, C.DOMAIN_DRIVER)),
                          ("driver ids only", (C.DOMAIN_DRIVER,)),
                          ("runtime ids only", (C.DOMAIN_RUNTIME,)),
                          ("no id", ())):
        configs[name], counts[name] = subscribed(domains)
    rounds = whole_cycles(a.rounds, len(configs))
    rows: dict = {}
    for wname, work in workloads.items():
        times = {k: [] for k in configs}
        for cm in configs.values():  # warm-up
            with cm():
                work()
                torch.cuda.synchronize()
        for r in range(rounds):
            for k, cm in round_order(configs, r):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                with cm():
                    work()
                    torch.cuda.synchronize()
                times[k].append(time.perf_counter() - t0)
        rows[wname] = {k: {"ids": counts.get(k, 0),
                           "ratio": round(statistics.median(
                               [x / b for x, b in zip(v, times["bare"])]), 4),
                           "median_ms": round(statistics.median(v) * 1e3, 3)}
                       for k, v in times.items()}
    ver = torch.__version__.split("+")[0]
    doc = {"kind": "syncguard-probe-cupti-domains", "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0), "rounds": rounds, "rows": rows}
    md = [f"# CUPTI's dispatch by domain, C no-op callback · {doc['gpu']} · torch "
          f"{torch.__version__}", "", f"`tools/probe_cupti_domains.py`; {rounds} rounds (Williams "
          "design); × bare: median over rounds of the loop over the same round's bare loop.", "",
          "| workload | subscribed on | ids | median ms | × bare |", "|---|---|---|---|---|"]
    md += [f"| {w} | {k} | {v['ids']} | {v['median_ms']} | {v['ratio']} |"
           for w, r in rows.items() for k, v in r.items()]
    emit_doc(doc, md, a.out, f"cupti-domains-{ver}")


if __name__ == "__main__":
    main()
