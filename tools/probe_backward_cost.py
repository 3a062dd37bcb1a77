"""Probe (H200, not a test): what the cuda detector's handling of autograd engine threads costs
in a training step, and how many calls it handles.

    python tools/probe_backward_cost.py [ROUNDS]

The step of bench/bench_overhead.py (4-layer TransformerEncoder, AdamW, batch 8x128x512) is
timed in interleaved, rotated rounds: bare; ``audit(cuda)``; and ``audit(cuda)`` with the
backward-engine proxy not installed (then calls on the engine's threads reach no region: what
the proxy and the Python path those calls take cost). One audited step is then split by thread:
calls on autograd engine threads go through the Python callback (the C one hands them over).
"""
import collections
import os
import statistics
import sys
import time

import torch

import syncguard
from syncguard.detectors.cuda.detector import HUB

# this tree's bench/ (the shared workloads), appended: ``syncguard`` stays whatever PYTHONPATH finds
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.workloads import train_step  # noqa: E402

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 41
step = train_step()


class NoProxy:
    def __enter__(self):
        self.saved = HUB.backward.install
        HUB.backward.install = lambda: None
        self.region = syncguard.audit(("cuda",))
        return self.region.__enter__()

    def __exit__(self, *exc):
        try:
            return self.region.__exit__(*exc)
        finally:
            HUB.backward.install = self.saved


class Bare:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


configs = {"bare": Bare, "audit(cuda)": lambda: syncguard.audit(("cuda",)),
           "audit(cuda), no backward proxy": NoProxy}
for cm in configs.values():
    for _ in range(3):
        with cm():
            step()
        torch.cuda.synchronize()
times = {k: [] for k in configs}
items = list(configs.items())
for r in range(rounds):
    for k, cm in items[r % 3:] + items[:r % 3]:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with cm():
            step()
            torch.cuda.synchronize()
        times[k].append(time.perf_counter() - t0)
print(f"torch {torch.__version__}, {HUB.callback}, {rounds} rotated rounds")
for k, v in times.items():
    ratio = statistics.median(x / b for x, b in zip(v, times["bare"]))
    print(f"{k}: median {statistics.median(v) * 1e3:.3f} ms, x bare per round (median) {ratio:.3f}")
region = syncguard.audit(("cuda",))
with region as rep:
    step()
    torch.cuda.synchronize()
by = collections.Counter((o.thread.split(" (")[0], o.api, o.direction) for o in region.observations
                         if o.source == "cuda")
print("one audited step, kept calls by (thread, api, direction):")
for key, n in sorted(by.items()):
    print(f"  {key}: {n}")
print("events:", [(e.kind, e.api) for e in rep.syncs + rep.allowed])
