"""Probe (H200, not a test): does the pointer query at a region's exit cost more right after
CUPTI is unsubscribed than before it?

    python tools/probe_query_order.py [--rounds 61]

In a real 100-merge region the exit's ``pointer_kinds`` took ~0.1 ms (the version matrix's
region breakdown at 0a2bca4), against ~0.03 ms when timed alone after merges and a device sync
(reports/probes/exit-cf9999a/). This times the same steps by hand, round by round, in three
orders after 100 merges (no sync before them, as at a region's exit):

* ``query after off``: callbacks off and unsubscribed (``_cuptifast.off``), then the query
  (``torch.cuda.is_current_stream_capturing`` + ``cudaPointerGetAttributes`` on the pinned block,
  through ``_cuptifast.pointer_types``), as the detector does today;
* ``query before off``: the query, then callbacks off and unsubscribed;
* ``no CUPTI``: the query with no subscription at all that round.

Each round also times the ``torch.cuda.synchronize()`` that follows (the next CUDA call after the
exit, which would pay whatever the query did not), and prints medians in microseconds.
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

import torch

import syncguard
from syncguard.detectors.cuda import hostmem
from syncguard.detectors.cuda.detector import HUB

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree's bench/
from bench.workloads import mask_merges, merge_state  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--rounds", type=int, default=61)
a = ap.parse_args()

why = HUB.unavailable()
assert why is None and HUB.fast is not None, (why, HUB.callback)
fast, lib = HUB.fast, HUB.lib.lib
sub, enable, unsub = (ctypes.cast(f, ctypes.c_void_p).value
                      for f in (lib.cuptiSubscribe, lib.cuptiEnableCallback, lib.cuptiUnsubscribe))
cudart = hostmem._load_cudart()
addrs = hostmem._addresses(cudart)
st = merge_state()
ptr = None


def query():
    torch.cuda.is_current_stream_capturing()
    return fast.pointer_types(*addrs, [ptr])


def one(order):
    torch.cuda.synchronize()
    h = 0
    if order != "no CUPTI":
        code, h, _ = fast.on(sub, enable, 0)
        assert code == 0, code
    mask_merges(st, 100)
    t0 = time.perf_counter()
    if order == "query after off":
        fast.off(enable, unsub, h)
        t1 = time.perf_counter()
        types = query()
    elif order == "query before off":
        t1 = time.perf_counter()
        types = query()
    else:
        t1 = time.perf_counter()
        types = query()
    t2 = time.perf_counter()
    if order == "query before off":
        fast.off(enable, unsub, h)
    t3 = time.perf_counter()
    torch.cuda.synchronize()
    t4 = time.perf_counter()
    assert types == (1,), types  # cudaMemoryTypeHost: the pinned block
    return {"off": (t1 - t0 if order == "query after off" else t3 - t2) * 1e6,
            "query": (t2 - t1) * 1e6, "sync after": (t4 - t3) * 1e6, "all": (t4 - t0) * 1e6}


# the merge's pinned staging block: the host pointer its async copy reads
region = syncguard.audit(("cuda",))
region.__enter__()
mask_merges(st, 1)
torch.cuda.synchronize()
region.__exit__(None, None, None)
copies = [o for o in region.observations if o.role == "copy" and o.direction == "h2d"]
ptr = copies[0].src
print(f"pinned block 0x{ptr:x}; {HUB.callback}; torch {torch.__version__}", flush=True)

orders = ["query after off", "query before off", "no CUPTI"]
for order in orders:  # warm-up
    one(order)
got = {o: [] for o in orders}
for r in range(a.rounds):
    for order in orders[r % 3:] + orders[:r % 3]:
        got[order].append(one(order))
for order in orders:
    med = {k: statistics.median(x[k] for x in got[order]) for k in got[order][0]}
    print(f"{order}: " + ", ".join(f"{k} {v:.1f} us" for k, v in med.items()), flush=True)
