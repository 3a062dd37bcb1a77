"""Probe (CPU, not a test): where a cold ``audit(cuda)`` region's entry and exit go, step by step.

    python tools/probe_cold_pieces.py [--rounds 61] [--out FILE]

It runs ``bench_callback``'s cold region (``_region_cold``: a C stand-in for libcupti, a fake
libcudart saying pinned, 100 async copies and a device sync fired through the C callback, caches
thrashed before entering and before leaving). Each step of the region, the hub and the detector
is wrapped with a clock for the run. Nested steps are inside their callers' figures, and each
wrapper adds its own clock reads, so the figures are above the untimed cost. It prints, and with
``--out`` writes as markdown, the median µs per region of each step (the first 10 regions are
left out).

Why: the H200's overhead benchmark puts a 100-merge region's entry and exit at a few percent of
the loop, and the knock-outs need to know which step to cut.
"""
import argparse
import collections
import functools
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree

import bench.bench_callback as bench  # noqa: E402
from bench import emit  # noqa: E402
import syncguard.detectors as registry  # noqa: E402
from syncguard.regions import region as scope  # noqa: E402
from syncguard.detectors.cuda import detector as cuda
from syncguard.detectors.cuda import calls as cudacalls  # noqa: E402

STEPS = [(scope.Region, n) for n in ("__enter__", "_cuda_unavailable", "_arm", "__exit__",
                                     "_disarm", "_finalize", "_judge")]
STEPS += [(registry, "resolve"), (cuda.Cuda, "arm"), (cuda.Cuda, "disarm"), (cuda.Cuda, "finish")]
# (not CuptiHub.unavailable: the stand-in hub answers that itself)
STEPS += [(cuda.CuptiHub, n) for n in ("acquire", "_subscribe", "_on", "release", "_unsubscribe",
                                       "_off")]
STEPS += [(cuda, n) for n in ("wrap_profiler_start", "unwrap", "combine_by_pointer")]
STEPS += [(cudacalls.BackwardOwners, "install"), (cudacalls.BackwardOwners, "restore")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=61)
    ap.add_argument("--out")
    a = ap.parse_args()
    now: dict = {}  # step -> ns in the region being timed
    rows = collections.defaultdict(list)  # step -> µs per region

    def clocked(label, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            t0 = time.perf_counter_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                now[label] = now.get(label, 0) + time.perf_counter_ns() - t0
        return wrapped

    for owner, name in STEPS:
        label = f"{getattr(owner, '__name__', owner)}.{name}"
        setattr(owner, name, clocked(label, getattr(owner, name)))
    init, leave = scope.Region.__init__, scope.Region.__exit__

    def timed_init(self, *args, **kwargs):
        now.clear()
        t0 = time.perf_counter_ns()
        init(self, *args, **kwargs)
        now["Region.__init__"] = time.perf_counter_ns() - t0

    def recorded_exit(self, *args):
        out = leave(self, *args)
        for k, v in now.items():
            rows[k].append(v / 1000)
        return out

    scope.Region.__init__, scope.Region.__exit__ = timed_init, recorded_exit
    enter_us, exit_us = bench._region_cold(a.rounds)
    md = [f"# A cold audit(cuda) region's steps on the CPU · python {sys.version.split()[0]} · "
          f"torch {bench.torch.__version__} · {a.rounds} regions, the first 10 left out", "",
          f"`tools/probe_cold_pieces.py`: entering {enter_us:.1f} µs, leaving {exit_us:.1f} µs "
          "(median, with the clocks below inside); median µs per region of each step, nested "
          "steps inside their callers:", "", "| step | µs |", "|---|---|"]
    md += [f"| `{k}` | {statistics.median(v[10:]):.2f} |" for k, v in rows.items()]
    emit(md, a.out)


if __name__ == "__main__":
    main()
