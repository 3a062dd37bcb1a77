"""Probe (H200, not a test): does the overhead benchmark's design move the default's reading?

    python tools/probe_design.py [--pairs 12] [--out DIR]     # times, writes DIR/design-<torch>.{json,md}
    python tools/probe_design.py --render FILE.json [--out DIR]   # the .md again from a run's JSON

Why: the version matrix reads issue 12's target (≤1.05x) on ``bench/bench_overhead.py``, whose
rounds time nine configurations in a Williams design: bare and the default, and seven others
kept for the breakdown (raw CUPTI subscriptions, the Python callback, activity records, the
fallback). The issue words its benchmark as "bare vs the default ... interleaved rounds". On
torch 2.8.0's 100 merges the same library read 1.051 in the matrix's nine-configuration runs
and 1.043-1.048 with only bare and the default alternating, but on another host
(reports/probes/pair-fold-20d430a/). Host and design were confounded there. This probe runs
both designs in one process, on one host, in alternating blocks:

* ``nine``: one cycle of the benchmark's own design (18 rounds of its nine configurations,
  ``bench_overhead.phase_one``);
* ``two``: 18 rounds of bare and the default only, alternating (the same Williams rows for two).

A pair is one block of each, in an order that alternates pair by pair. Each round's ratio is the
default's loop over the bare loop of the same round, as in the benchmark. The reading, fixed
before any run: per workload, the median over all rounds of each design, and the difference of
the two medians (nine minus two) with a 95% interval from resampling the pairs whole (4,000
times, seed 0). The region opens and closes inside each timed loop, as in the benchmark.
"""
from __future__ import annotations

import os
import random
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tools/, for overhead_ci

from overhead_ci import interval, paired_ratios  # noqa: E402

BLOCK = 18  # rounds per block: one Williams cycle of nine configurations, nine of two
RESAMPLES = 4000


def main(argv=None) -> int:
    from bench import probe_main

    return probe_main(argv, run, render, "design", "--pairs", 12)


def run(pairs: int) -> dict:
    import torch

    from bench import bench_overhead as bo
    from bench.design import round_order
    from syncguard.detectors.cuda.detector import HUB
    from syncguard.reporting.provenance import git_state

    why = HUB.unavailable()
    if why:
        raise SystemExit(f"cuda detector unavailable: {why}")
    nine = bo.phase_one()
    designs = {"nine": nine, "two": {"bare": nine["bare"], bo.DEFAULT: nine[bo.DEFAULT]}}
    st = bo.loop_state()
    loops = bo.workloads()
    out = {}
    for wname, work in loops:
        for cm in nine.values():  # warm-up of every path
            bo.timed(work, cm, st)
        got = {d: {"default_ms": [], "bare_ms": []} for d in designs}
        first = []
        for p in range(pairs):
            order = ("nine", "two") if p % 2 == 0 else ("two", "nine")
            first.append(order[0])
            for d in order:
                for r in range(BLOCK):
                    times = {k: bo.timed(work, cm, st) for k, cm in round_order(designs[d], r)}
                    got[d]["default_ms"].append(round(times[bo.DEFAULT] * 1e3, 4))
                    got[d]["bare_ms"].append(round(times["bare"] * 1e3, 4))
        out[wname] = {"first": first, **got}
        print(f"{wname}: " + "; ".join(
            f"{d} {statistics.median(ratios(got[d])):.3f}x" for d in designs), flush=True)
    git = git_state(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) or {}
    return {"schema_version": 1, "kind": "syncguard-probe-design", "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0), "callback": HUB.callback,
            "commit": git.get("commit"), "dirty": git.get("dirty"), "pairs": pairs,
            "block_rounds": BLOCK, "configs_nine": list(nine), "workloads": out}


def ratios(d: dict) -> list[float]:
    """The default's loop over the bare loop of the same round, round by round."""
    return paired_ratios(d, "default_ms", "bare_ms")


def difference(nine: list[float], two: list[float], block: int = BLOCK, seed: int = 0):
    """(median of nine - median of two, 2.5th and 97.5th percentile of that difference over
    resampled pairs): pair k is block k of each design, drawn together."""
    if len(nine) != len(two) or not nine or len(nine) % block:
        raise ValueError("both designs need the same whole number of blocks")
    pairs = [(nine[i:i + block], two[i:i + block]) for i in range(0, len(nine), block)]
    rng = random.Random(seed)
    diffs = []
    for _ in range(RESAMPLES):
        drawn = rng.choices(pairs, k=len(pairs))
        diffs.append(statistics.median([x for n, _ in drawn for x in n])
                     - statistics.median([x for _, t in drawn for x in t]))
    return (statistics.median(nine) - statistics.median(two), *interval(sorted(diffs)))


def render(doc: dict) -> list[str]:
    from bench import probe_title

    lines = [probe_title("The benchmark's design and the default's reading", doc), "",
             f"`tools/probe_design.py --pairs {doc['pairs']}`; {doc['callback']}. Per workload, "
             f"{doc['pairs']} pairs of blocks of {doc['block_rounds']} rounds, one block of each "
             "design per pair, their order alternating: `nine` is one cycle of the overhead "
             "benchmark's own design (" + ", ".join(f"`{c}`" for c in doc["configs_nine"]) + "); "
             "`two` is bare and the default alone. A round's ratio is the default's loop over "
             "the bare loop of that round; medians over rounds, quartiles in brackets; the "
             f"difference's 95% interval resamples the pairs whole ({RESAMPLES:,} times, seed 0).",
             "", "| workload | nine: median [quartiles] | two: median [quartiles] | nine − two "
             "[95% interval] | bare ms, nine / two |", "|---|---|---|---|---|"]
    for wname, w in doc["workloads"].items():
        cells = []
        for d in ("nine", "two"):
            r = ratios(w[d])
            q1, _, q3 = statistics.quantiles(r, n=4)
            cells.append(f"{statistics.median(r):.3f} [{q1:.3f}, {q3:.3f}]")
        diff, lo, hi = difference(ratios(w["nine"]), ratios(w["two"]), doc["block_rounds"])
        bare = " / ".join(f"{statistics.median(w[d]['bare_ms']):.2f}" for d in ("nine", "two"))
        lines.append(f"| {wname} | {cells[0]} | {cells[1]} | {diff:+.3f} [{lo:+.3f}, {hi:+.3f}] "
                     f"| {bare} |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
