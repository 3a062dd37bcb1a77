"""Probe (GPU, not a test): how much of a cold ``audit(cuda)`` region's entry and exit is CUPTI's.

    python tools/probe_cupti_cold.py [--rounds 60] [--out DIR]

Why: the overhead benchmark (reports/gpu/<v>/overhead-<v>.json, row ``audit(cuda) pointer``)
puts a 100-merge region's entry at ~0.1 ms and its exit at ~0.11-0.12 ms, ten times the same
region entered and left back to back, and 2.8.0's merges cell sits just over 1.05x on that fixed
cost. Cutting it needs its split: the hub's one C call each way (``_cuptifast.on``: cuptiSubscribe
and every callback id enabled; ``off``: every id disabled and cuptiUnsubscribe) against the rest
(Python, the pointer query, the events).

Each round runs a neighbour first (100 merges bare, or under the ``debug,trace`` fallback: the
benchmark's neighbour that leaves the default slowest), then one of:

* ``cupti``: the hub's ``_on`` (subscribe, every id on), 100 merges and a device sync, the hub's
  ``_off`` (every id off, unsubscribe), no region: CUPTI's part alone;
* ``split``: the same as ``cupti`` a step at a time: cuptiSubscribe through ctypes, every id on in
  one C call (``_cuptifast.switch``), the loop, every id off, cuptiUnsubscribe;
* ``region``: ``audit(("cuda",))`` around the same 100 merges and sync: the whole entry and exit.

Entry is timed from before the call to after it; exit the same. Medians per neighbour and kind
(the first 4 rounds left out), printed and written to DIR/cupti-cold-<torch>.{json,md}. The order
of neighbour and kind cycles through all six pairs, so each pair runs equally often.
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree

import torch  # noqa: E402

from bench import emit_doc, gpu_probe_args  # noqa: E402

import syncguard  # noqa: E402
from bench.workloads import mask_merges, merge_state  # noqa: E402
from syncguard.detectors.cuda.detector import HUB  # noqa: E402


def merges(st):
    mask_merges(st, 100)
    torch.cuda.synchronize()


def neighbour(name, st):
    if name == "bare":
        merges(st)
    else:
        with syncguard.audit(("debug", "trace")):
            merges(st)


def cupti_only(st):
    """CUPTI's part of a region: the hub's own on/off calls around the loop, no region."""
    t0 = time.perf_counter()
    code = HUB._on(fresh=True)
    t1 = time.perf_counter()
    if code != 0:
        raise RuntimeError(f"cuptiSubscribe failed: {HUB.lib.error_name(code)}")
    try:
        merges(st)
    finally:
        t2 = time.perf_counter()
        HUB._off(unsubscribe=True)
        t3 = time.perf_counter()
        HUB.handle.value = None
    return {"entry": t1 - t0, "exit": t3 - t2}


def split(st):
    """cupti_only a step at a time (each ctypes call adds ~1-3 us of its own)."""
    import ctypes

    lib = HUB.lib.lib
    cb = HUB._cb if HUB.fast is None else HUB._cb_fast
    t0 = time.perf_counter()
    code = lib.cuptiSubscribe(ctypes.byref(HUB.handle), cb, None)
    t1 = time.perf_counter()
    if code != 0:
        raise RuntimeError(f"cuptiSubscribe failed: {HUB.lib.error_name(code)}")
    try:
        HUB._switch(1)
        t2 = time.perf_counter()
        merges(st)
    finally:
        t3 = time.perf_counter()
        HUB._switch(0)
        t4 = time.perf_counter()
        lib.cuptiUnsubscribe(HUB.handle)
        t5 = time.perf_counter()
        HUB.handle.value = None
    return {"entry": t2 - t0, "exit": t5 - t3, "subscribe": t1 - t0, "enable every id": t2 - t1,
            "disable every id": t4 - t3, "unsubscribe": t5 - t4}


def region(st):
    t0 = time.perf_counter()
    r = syncguard.audit(("cuda",))
    rep = r.__enter__()
    t1 = time.perf_counter()
    try:
        merges(st)
    finally:
        t2 = time.perf_counter()
        r.__exit__(None, None, None)
        t3 = time.perf_counter()
    assert rep.detectors == ("cuda",), rep.notes
    return {"entry": t1 - t0, "exit": t3 - t2}


def main():
    a = gpu_probe_args(60)
    st = merge_state()
    kinds = {"cupti": cupti_only, "split": split, "region": region}
    pairs = [(n, k) for n in ("bare", "debug,trace fallback") for k in kinds]
    for n, k in pairs:  # warm-up of every path
        neighbour(n, st)
        kinds[k](st)
    got: dict = {f"{k} after {n}": {} for n, k in pairs}
    for r in range(a.rounds * len(pairs)):
        n, k = pairs[(r + r // len(pairs)) % len(pairs)]
        neighbour(n, st)
        times = kinds[k](st)
        if r >= 4 * len(pairs):
            for step, t in times.items():
                got[f"{k} after {n}"].setdefault(step, []).append(t * 1e3)
    rows = {name: {step: round(statistics.median(v), 4) for step, v in steps.items()}
            for name, steps in got.items()}
    ver = torch.__version__.split("+")[0]
    doc = {"kind": "syncguard-probe-cupti-cold", "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0), "callback": HUB.callback,
           "callback_ids": len(HUB.table), "rows": rows,
           "rounds_ms": {name: {step: [round(v, 4) for v in vals] for step, vals in steps.items()}
                         for name, steps in got.items()}}
    md = [f"# CUPTI's part of a cold audit(cuda) region · {doc['gpu']} · torch {torch.__version__}",
          "", f"`tools/probe_cupti_cold.py --rounds {a.rounds}`; {len(HUB.table)} callback ids, "
          f"{HUB.callback}; medians in ms.", "",
          "| kind after neighbour | rounds | step | ms |", "|---|---|---|---|"]
    md += [f"| {k} | {len(got[k]['entry'])} | {step} | {ms} |" for k, v in rows.items()
           for step, ms in v.items()]
    emit_doc(doc, md, a.out, f"cupti-cold-{ver}")


if __name__ == "__main__":
    main()
