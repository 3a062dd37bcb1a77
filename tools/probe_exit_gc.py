"""Probe (GPU, not a test): does the garbage collector run inside a 100-merge region's exit?

    python tools/probe_exit_gc.py [--regions 200] [--out FILE.json]

The overhead benchmark's ``audit(cuda)`` regions around 100 merges (bench.workloads) are entered
and left as bench_overhead times them; ``gc.callbacks`` records each collection (generation,
duration, and whether it ran while the region was being left, in its body, or outside). Printed
and written: per region, the median µs to leave it, split by whether a collection ran in the
exit, and the collections per region by generation and where they ran. Also the same regions with
``gc.freeze()`` called once before them (every object alive then moved out of the collector's
reach), side by side, so the share of the exit that is collection shows in one run.

Why: at d7f02b4 on torch 2.8.0 a 100-merge region's exit took 0.156 ms per round in the overhead
benchmark against 0.059 ms in its clocked breakdown; each region's exit builds 100 events (three
objects the collector tracks each), enough to start a young-generation collection every few
regions.
"""
import argparse
import gc
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import syncguard  # noqa: E402
from bench.workloads import mask_merges, merge_state  # noqa: E402


def run(st, regions: int) -> dict:
    where = ["outside"]
    seen = []
    t_start = {}

    def on_gc(phase, info):
        if phase == "start":
            t_start["t"] = time.perf_counter_ns()
        else:
            seen.append((info["generation"], where[0], (time.perf_counter_ns() - t_start["t"]) / 1e3))

    gc.callbacks.append(on_gc)
    exits, with_gc = [], []
    try:
        for i in range(regions + 10):
            torch.cuda.synchronize()
            n0 = len(seen)
            region = syncguard.audit(("cuda",))
            where[0] = "entry"
            region.__enter__()
            where[0] = "body"
            mask_merges(st, 100)
            torch.cuda.synchronize()
            where[0] = "exit"
            t0 = time.perf_counter_ns()
            region.__exit__(None, None, None)
            del region
            t1 = time.perf_counter_ns()
            where[0] = "outside"
            if i >= 10:
                exits.append((t1 - t0) / 1e3)
                with_gc.append(any(w == "exit" for _, w, _ in seen[n0:]))
    finally:
        gc.callbacks.remove(on_gc)
    counts: dict = {}
    for gen, w, us in seen:
        c = counts.setdefault(f"gen{gen} in {w}", [0, 0.0])
        c[0] += 1
        c[1] += us
    return {
        "exit_us_median": round(statistics.median(exits), 1),
        "exit_us_median_with_a_collection": round(statistics.median(
            [e for e, g in zip(exits, with_gc) if g]), 1) if any(with_gc) else None,
        "exit_us_median_without": round(statistics.median(
            [e for e, g in zip(exits, with_gc) if not g]), 1) if not all(with_gc) else None,
        "exits_with_a_collection": sum(with_gc), "regions": len(exits),
        "collections": {k: {"count": n, "total_us": round(t, 1)} for k, (n, t) in sorted(counts.items())},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--regions", type=int, default=200)
    ap.add_argument("--out")
    a = ap.parse_args()
    st = merge_state()
    for _ in range(3):
        with syncguard.audit(("cuda",)):
            mask_merges(st, 100)
    doc = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
           "gc_threshold": gc.get_threshold(), "as is": run(st, a.regions)}
    gc.collect()
    gc.freeze()
    doc["after gc.freeze()"] = run(st, a.regions)
    gc.unfreeze()
    print(json.dumps(doc, indent=1))
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(doc, fh, indent=1)


if __name__ == "__main__":
    main()
