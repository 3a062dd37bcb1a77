"""Probe (H200, not a test): where a cuda region's exit spends its time, and what switching the
callbacks off costs each way CUPTI offers.

    python tools/probe_region_exit.py

1. A 100-merge region's observations are captured, then the exit's judging is timed on them
   alone: ``combine`` with host memory asked as it goes (``pointer_kinds``: the query at exit),
   and with it known already; warm (back to back) and cold (right after another 100 merges and a
   device sync, as in a real region's exit). (Until effc77e ``pointer_kinds`` was a pass of its
   own, timed apart: ``reports/probes/exit-cf9999a/``.) Then the exit's own path with the C
   module, ``combine_by_pointer`` (one C call, ``_cuptifast.by_pointer``, which
   replaced ``drop_pinned`` then ``combine``; the 8b316a8 run timed ``drop_pinned`` alone too), and the runtime's pointer question for the region's
   distinct host pointers alone.
2. Switching every callback off before ``cuptiUnsubscribe`` (which keeps a syncing thread from
   crashing: reports/probes/cupti-threads-2.11.0/): one ``cuptiEnableCallback(0)`` per id (the
   detector's way, in one C loop), ``cuptiEnableDomain(0)`` for the runtime and driver domains, or
   ``cuptiEnableAllDomains(0)``; each timed warm and cold, and checked: after it, a device sync
   must reach no callback.
"""
import ctypes
import os
import statistics
import sys
import time

import torch

import syncguard
from syncguard.detectors.cuda import cupti as C
from syncguard.detectors.cuda import hostmem
from syncguard.detectors.cuda.detector import HUB, combine, combine_by_pointer

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree's bench/
from bench.workloads import mask_merges, merge_state  # noqa: E402

st = merge_state()


def merges():
    mask_merges(st, 100)
    torch.cuda.synchronize()


for _ in range(3):
    region = syncguard.audit(("cuda",))
    region.__enter__()
    merges()
    region.__exit__(None, None, None)
obs = [o for o in region.observations if o.source == "cuda"]
print(f"{len(obs)} observations; {HUB.callback}; "
      f"{len({o.host_ptr for o in obs if o.role == 'copy'})} distinct host pointer(s)")


def warm(name, fn, n=200):
    fn()
    ts = []
    for _ in range(15):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        ts.append((time.perf_counter() - t0) / n * 1e6)
    print(f"{name}, warm: {min(ts):.2f} us (median of 15 x {n}: {statistics.median(ts):.2f})")


def cold(name, fn, before=merges, reps=21):
    vals = []
    for _ in range(reps):
        before()
        t0 = time.perf_counter()
        fn()
        vals.append((time.perf_counter() - t0) * 1e6)
    print(f"{name}, cold (after 100 merges and a sync): median {statistics.median(vals):.1f} us")


memory = hostmem.pointer_kinds(HUB.fast)
combine(obs, memory)  # asks the pinned block once; later passes read it
ptrs = sorted({o.host_ptr for o in obs if o.role == "copy" and o.host_ptr})
addrs = hostmem._addresses(hostmem._load_cudart())
for name, fn in (("combine(obs) with the pointer asked (hostmem.pointer_kinds)",
                  lambda: combine(obs, hostmem.pointer_kinds(HUB.fast))),
                 ("combine(obs), the pointer known", lambda: combine(obs, memory)),
                 # what the exit runs (with the C module): _cuptifast.by_pointer, one C call
                 ("combine_by_pointer(obs, C module) (the exit's)",
                  lambda: combine_by_pointer(obs, HUB.fast)),
                 (f"cudaPointerGetAttributes on the {len(ptrs)} distinct host pointer(s), one batch",
                  lambda: HUB.fast.pointer_types(*addrs, ptrs))):
    warm(name, fn)
    cold(name, fn)

lib = HUB.lib.lib
lib.cuptiEnableAllDomains.argtypes = [ctypes.c_uint32, ctypes.c_void_p]
lib.cuptiEnableDomain.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int]
counts = [0]


@C.CALLBACK
def count(userdata, domain, cbid, data):
    counts[0] += 1


enable_addr = ctypes.cast(lib.cuptiEnableCallback, ctypes.c_void_p).value
ways = {
    "cuptiEnableCallback(0) per id (45, one C loop)":
        lambda h: HUB.fast.switch(enable_addr, h.value, 0),
    "cuptiEnableDomain(0) x2 (runtime, driver)":
        lambda h: (lib.cuptiEnableDomain(0, h, C.DOMAIN_RUNTIME), lib.cuptiEnableDomain(0, h, C.DOMAIN_DRIVER)),
    "cuptiEnableAllDomains(0)": lambda h: lib.cuptiEnableAllDomains(0, h),
}
for name, off in ways.items():
    for mode in ("warm", "cold"):
        vals, leaked = [], 0
        for _ in range(21):
            handle = ctypes.c_void_p()
            assert lib.cuptiSubscribe(ctypes.byref(handle), count, None) == C.SUCCESS
            HUB.fast.switch(enable_addr, handle.value, 1)
            if mode == "cold":
                mask_merges(st, 100)
            counts[0] = 0
            torch.cuda.synchronize()  # seen: callbacks are on
            on = counts[0]
            t0 = time.perf_counter()
            off(handle)
            vals.append((time.perf_counter() - t0) * 1e6)
            counts[0] = 0
            torch.cuda.synchronize()  # must not be seen
            leaked += counts[0]
            lib.cuptiUnsubscribe(handle)
        print(f"switch off, {name}, {mode}: median {statistics.median(vals):.1f} us; "
              f"callbacks before {on}, after {leaked}")
