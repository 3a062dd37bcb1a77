"""Probe (GPU, not a test): why the default detector's loop is slower right after some neighbours.

    python tools/probe_neighbours.py [--rounds 40] [--out DIR]

Why: in the overhead benchmark at 36def12 (reports/gpu/<v>/overhead-<v>.json,
``default_ratio_after``) the default's 100 merges ran 1.01-1.02x bare right after CUPTI was
subscribed with no id enabled and 1.06-1.10x right after the ``debug,trace`` fallback or the
activity mode, while its entry and exit hardly moved: the extra time was inside the region.

Each round runs a neighbour (one of bench_overhead's configurations around 100 merges), then
times 100 merges either bare or in ``audit(("cuda",))`` (entry and exit included, as the
benchmark times them), and for the region also the loop alone. Neighbours: ``bare``; the
``fallback``; the ``activity`` mode; the ``Python callback``; CUPTI subscribed with ``no id``
enabled; and the fallback and the activity mode each followed by ``gc.collect()`` (does what they
leave for the garbage collector land in the next loop?). It records, per round, the garbage
collections that ran during the timed loop (``gc.callbacks``).

Medians per neighbour of: bare ms, region ms, region / bare, the region's loop alone ms, and the
collections per timed loop; printed and written to DIR/neighbours-<torch>.{json,md}. Each cycle
runs every (neighbour, timed kind) pair once, in an order shifted by one each cycle.
"""
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree

import torch  # noqa: E402

from bench import emit_doc, gpu_probe_args  # noqa: E402

import syncguard  # noqa: E402
from bench import bench_overhead as B  # noqa: E402
from bench.workloads import mask_merges, merge_state  # noqa: E402
from syncguard.detectors.cuda.detector import HUB  # noqa: E402

COLLECTIONS = []


def _on_gc(phase, info):
    if phase == "start":
        COLLECTIONS.append(info["generation"])


def loop(st):
    mask_merges(st, 100)
    torch.cuda.synchronize()


def main():
    a = gpu_probe_args(40)
    st = merge_state()
    fallback = lambda: syncguard.audit(("debug", "trace"))  # noqa: E731
    activity = B.cuda_with("activity", "activity")
    pycb = B.cuda_with("pointer", "pycb", "python")
    noid = B.cupti_raw("c", "none")

    def run(cm, then=None):
        def go():
            with cm():
                loop(st)
            if then:
                then()
        return go

    neighbours = {"bare": run(B.bare), "fallback": run(fallback), "activity": run(activity),
                  "Python callback": run(pycb), "no id": run(noid),
                  "fallback, then gc.collect()": run(fallback, gc.collect),
                  "activity, then gc.collect()": run(activity, gc.collect)}

    def timed_bare():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loop(st)
        return time.perf_counter() - t0, None

    def timed_region():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with syncguard.audit(("cuda",)) as rep:
            t1 = time.perf_counter()
            loop(st)
            t2 = time.perf_counter()
        t3 = time.perf_counter()
        assert rep.detectors == ("cuda",), rep.notes
        return t3 - t0, t2 - t1

    kinds = {"bare": timed_bare, "region": timed_region}
    pairs = [(n, k) for n in neighbours for k in kinds]
    for n, k in pairs:  # warm-up of every path
        neighbours[n]()
        kinds[k]()
    got: dict = {n: {"bare": [], "region": [], "loop": [], "gc bare": [], "gc region": []}
                 for n in neighbours}
    gc.callbacks.append(_on_gc)
    try:
        for r in range(a.rounds * len(pairs)):
            n, k = pairs[(r + r // len(pairs)) % len(pairs)]
            neighbours[n]()
            COLLECTIONS.clear()
            total, inner = kinds[k]()
            got[n][k].append(total * 1e3)
            got[n][f"gc {k}"].append(len(COLLECTIONS))
            if inner is not None:
                got[n]["loop"].append(inner * 1e3)
    finally:
        gc.callbacks.remove(_on_gc)
    rows = {}
    for n, v in got.items():
        bare, region = statistics.median(v["bare"]), statistics.median(v["region"])
        rows[n] = {"bare_ms": round(bare, 3), "region_ms": round(region, 3),
                   "region_over_bare": round(region / bare, 3),
                   "region_loop_ms": round(statistics.median(v["loop"]), 3),
                   "collections_per_bare_loop": round(statistics.mean(v["gc bare"]), 2),
                   "collections_per_region": round(statistics.mean(v["gc region"]), 2)}
    ver = torch.__version__.split("+")[0]
    doc = {"kind": "syncguard-probe-neighbours", "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0), "callback": HUB.callback, "rounds": a.rounds,
           "rows": rows, "rounds_ms": got}
    md = [f"# 100 merges bare and in audit(cuda), by the neighbour run just before · {doc['gpu']} "
          f"· torch {torch.__version__}", "",
          f"`tools/probe_neighbours.py --rounds {a.rounds}`; medians over {a.rounds} rounds per "
          "cell, ms; collections: mean garbage collections during the timed run.", "",
          "| neighbour just before | bare | region | region / bare | region's loop alone "
          "| collections, bare | collections, region |", "|---|---|---|---|---|---|---|"]
    md += [f"| {n} | {v['bare_ms']} | {v['region_ms']} | {v['region_over_bare']} "
           f"| {v['region_loop_ms']} | {v['collections_per_bare_loop']} "
           f"| {v['collections_per_region']} |" for n, v in rows.items()]
    emit_doc(doc, md, a.out, f"neighbours-{ver}")


if __name__ == "__main__":
    main()
