"""Probe (CPU, not a test): which Python functions an ``audit(("cuda",))`` region calls on its way
in and out, counted with ``sys.setprofile``.

    python tools/probe_region_calls.py [--out FILE]

It runs ``bench_callback``'s stand-in hub (a C stand-in for libcupti, the C callback, a fake
libcudart saying pinned) and one region around 100 async copies from one pinned block and a
device sync, as 100 sync-free merges make them (folded into one call by the C callback). It
prints, and with ``--out`` writes as markdown, each Python function entered while the region is
constructed and entered, and while it is left, in call order with its depth, and the counts of
Python and C calls.

Why: a region's entry and exit cost 10-20 us warm on the H200 but 0.16-0.26 ms inside the
overhead benchmark's rounds (``reports/gpu/<v>/overhead-<v>.json``), and about 6 us warm against
35-55 us each way cold on the CPU (``reports/cpu/fold-and-pair.md``): the cost is the cache misses
of the code and objects they touch, so the number of functions is what to cut.
"""
import argparse
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree

import bench.bench_callback as bench  # noqa: E402
from bench import emit  # noqa: E402
from bench.bench_callback import C, _data, _fake_cudart, _stand_in_hub  # noqa: E402
import syncguard  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    a = ap.parse_args()
    calls: list = []
    depth = [0]

    def prof(frame, event, arg):
        if event == "call":
            code = frame.f_code
            calls.append((depth[0], f"{os.path.basename(code.co_filename)}:{code.co_name}"))
            depth[0] += 1
        elif event == "return":
            depth[0] -= 1
        elif event == "c_call":
            calls.append((depth[0], f"C {getattr(arg, '__qualname__', arg)}"))

    phases = {}
    with _stand_in_hub() as hub, _fake_cudart(1):
        ids = {api: key for key, (api, *_) in hub.table.items()}
        copy = C.MemcpyAsyncParams(dst=0xd000, src=0x7000, count=4096, kind=1, stream=0)
        fire = [(ids["cudaMemcpyAsync"], _data(s, 1, copy)) for s in (C.API_ENTER, C.API_EXIT)] * 100
        fire += [(ids["cudaDeviceSynchronize"], C.CallbackData(callbackSite=s, correlationId=2))
                 for s in (C.API_ENTER, C.API_EXIT)]
        fired = [(d, cbid, ctypes.addressof(data)) for (d, cbid), data in fire]
        for _ in range(3):  # warm: every cache and lazy import settled
            with syncguard.audit(("cuda",)):
                for f in fired:
                    hub.fast.fire(*f)
        for phase in ("constructed and entered", "left"):
            region = syncguard.audit(("cuda",)) if phase != "left" else region
            calls.clear()
            depth[0] = 0
            sys.setprofile(prof)
            try:
                if phase == "left":
                    region.__exit__(None, None, None)
                else:
                    region = syncguard.audit(("cuda",))
                    region.__enter__()
            finally:
                sys.setprofile(None)
            phases[phase] = [c for c in calls if "setprofile" not in c[1]]
            if phase != "left":
                for f in fired:
                    hub.fast.fire(*f)
    md = [f"# Python functions an audit((\"cuda\",)) region calls, warm · python {sys.version.split()[0]} "
          f"· torch {bench.torch.__version__}", "",
          "`tools/probe_region_calls.py`: one region around 100 async copies from one pinned block "
          "and a device sync, over the C stand-in for libcupti; `C` marks a call into C.", ""]
    for phase, got in phases.items():
        py = sum(1 for _, n in got if not n.startswith("C "))
        md += [f"## {phase}: {py} Python function(s), {len(got) - py} C call(s)", "", "```"]
        md += [("  " * d) + n for d, n in got]
        md += ["```", ""]
    emit(md, a.out)


if __name__ == "__main__":
    main()
