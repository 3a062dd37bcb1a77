"""Probe (H200, not a test): the default detector against the bare loop, for two versions of
syncguard run alternately on one machine (the library is whichever ``syncguard`` PYTHONPATH
finds; this script is the same for both).

    PYTHONPATH=TREE python tools/probe_ab.py --label NAME --out FILE.json [--rounds 61]

Workloads: the training step of bench/bench_overhead.py; its 100 sync-free merges; and 100
merges with a CUDA mask (``index_put_`` syncs once per call: 100 syncs for the region to
report). Each round times bare and ``audit(cuda)`` in an order that alternates round by round;
the ratio is per round (audit over the bare loop of the same round), median and quartiles over
rounds, with the region's entry and exit (medians, ms).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

import syncguard
from syncguard.detectors.cuda.detector import HUB

# this tree's bench/ (the shared workloads), appended: ``syncguard`` stays whatever PYTHONPATH finds
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.workloads import mask_merges, merge_state, train_step  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--label", required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--rounds", type=int, default=61)
ap.add_argument("--only", help="time only the workloads whose name contains this")
a = ap.parse_args()

step = train_step()
st = merge_state()
synced = dict(st, mask=st["mask"].cuda())  # a CUDA mask: index_put_ syncs once per call


def merges():
    mask_merges(st, 100)


def synced_merges():
    mask_merges(synced, 100)


def timed(work, audited):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    if not audited:
        work()
        torch.cuda.synchronize()
        return time.perf_counter() - t0, None, None
    region = syncguard.audit(("cuda",))
    rep = region.__enter__()
    t1 = time.perf_counter()
    work()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    region.__exit__(None, None, None)
    t3 = time.perf_counter()
    assert rep.detectors == ("cuda",), rep.notes
    return t3 - t0, (t1 - t0) * 1e3, (t3 - t2) * 1e3


out = {"label": a.label, "torch": torch.__version__, "callback": HUB.callback,
       "syncguard": syncguard.__file__, "rounds": a.rounds, "results": {}}
for name, work in (("transformer training step", step), ("100 merges", merges),
                   ("100 merges with a CUDA mask (100 syncs)", synced_merges)):
    if a.only and a.only not in name:
        continue
    for audited in (False, True, False, True):  # warm-up
        timed(work, audited)
    ratios, enter, leave = [], [], []
    for r in range(a.rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        got = {aud: timed(work, aud) for aud in order}
        ratios.append(got[True][0] / got[False][0])
        enter.append(got[True][1])
        leave.append(got[True][2])
    q1, med, q3 = statistics.quantiles(ratios, n=4)
    out["results"][name] = {"ratio": round(statistics.median(ratios), 3), "ratio_q1": round(q1, 3),
                            "ratio_q3": round(q3, 3), "enter_ms": round(statistics.median(enter), 3),
                            "exit_ms": round(statistics.median(leave), 3)}
    print(f"{a.label}: {name}: x{out['results'][name]['ratio']} [{q1:.3f}, {q3:.3f}] "
          f"enter {statistics.median(enter):.3f} ms exit {statistics.median(leave):.3f} ms", flush=True)
out["callback"] = HUB.callback  # known once a region has loaded CUPTI
with open(a.out, "w") as f:
    json.dump(out, f, indent=1)
