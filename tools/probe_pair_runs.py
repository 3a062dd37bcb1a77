"""Probe (CPU, not a test): what a region costs around torch 2.8's merge pattern, 100 async
copies each completed by its own stream sync from one line, fired through the C callback.

    python tools/probe_pair_runs.py [--tree DIR] [--rounds 301] [--out FILE]

Over ``bench_callback``'s stand-in hub (a C stand-in for libcupti, a fake libcudart saying
pageable) of the tree ``DIR`` (default: this one), so that two commits can be run in turn on one
machine (a tree as new as the probe's own imports). It prints, and with ``--out`` writes as
markdown, medians over ``rounds``:

* ``fired in a region``: µs to fire the 400 callbacks (ENTER and EXIT of 100 copies and 100
  syncs) at the C callback inside an ``audit(cuda)`` region, warm;
* ``fired with no region``: the same loop with no region open (the callback returns at once),
  the firing loop's own cost;
* ``cold entry`` and ``cold exit``: ``bench_callback._region_cold(pairs=True)``, the region's
  entry (which frees the previous region's calls and events) and exit (which builds 100 events)
  with caches thrashed before each.

Why: on torch 2.8.0 the 100-merge cell of the overhead benchmark is the one over 1.05x on the
H200, and each of its 100 pairs makes a Call. Folding runs of pairs into one Call (20d430a, since
reverted) was measured with this on the CPU and with ``tools/probe_ab.py`` on the H200
(reports/probes/pair-fold-20d430a/).
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--tree", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ap.add_argument("--rounds", type=int, default=301)
ap.add_argument("--out")
a = ap.parse_args()
sys.path.insert(0, os.path.abspath(a.tree))

import bench.bench_callback as B  # noqa: E402
import syncguard  # noqa: E402
from bench import commit_label, emit  # noqa: E402
from syncguard.reporting.provenance import git_state  # noqa: E402


def main():
    with B._stand_in_hub() as hub, B._fake_cudart(0):
        if hub.fast is None:
            raise SystemExit("the C module is not built: python setup.py build_ext --inplace")
        calls = B.merge_calls(hub, pairs=True)
        fired = [(d, cbid, ctypes.addressof(data)) for d, cbid, data in calls]
        fire = hub.fast.fire

        def loop():
            for args in fired:
                fire(*args)
        inside, outside = [], []
        for i in range(a.rounds):
            region = syncguard.audit(("cuda",))
            report = region.__enter__()
            t0 = time.perf_counter_ns()
            loop()
            t1 = time.perf_counter_ns()
            region.__exit__(None, None, None)
            assert [e.kind for e in report.syncs] == ["blocking_copy_h2d"] * 100, report.syncs
            t2 = time.perf_counter_ns()
            loop()
            t3 = time.perf_counter_ns()
            if i >= 10:
                inside.append((t1 - t0) / 1e3)
                outside.append((t3 - t2) / 1e3)
    enter, leave = B._region_cold(a.rounds, pairs=True)
    git = git_state(os.path.abspath(a.tree)) or {}
    commit = commit_label(git)
    lines = [f"# 100 copy-and-sync pairs from one line through the C callback · CPU · python "
             f"{sys.version.split()[0]} · commit {commit}", "",
             f"`tools/probe_pair_runs.py --rounds {a.rounds}` (the stand-in hub; medians, µs):", "",
             "| fired in a region | fired with no region | cold entry | cold exit |",
             "|---|---|---|---|",
             f"| {statistics.median(inside):.1f} | {statistics.median(outside):.1f} | {enter:.1f} "
             f"| {leave:.1f} |"]
    emit(lines, a.out)


if __name__ == "__main__":
    main()
