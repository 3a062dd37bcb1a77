"""How sure the committed overhead figures are: a bootstrap interval for each cell's median.

    python tools/overhead_ci.py [--target 1.05] [--out reports/gpu/overhead-ci.md | --check FILE] [FILES...]

Each cell of the overhead benchmark (``bench/bench_overhead.py``) is the median, over its rounds,
of the configuration's time over the bare loop's in the same round. With ~108 rounds that median
still moves by about a percent from one lease to the next, so a cell a few tenths of a percent
from the target (≤1.05×) says little on its own. This reads each version's
``rounds_ms`` (the committed evidence, FILES default ``reports/gpu/*/overhead-*.json``),
resamples the rounds with replacement (fixed seed, so the output is reproducible) and writes,
per torch and workload, the median, its 95% interval, and the share of resampled medians at or
under the target. Rounds are resampled whole, so each keeps its own bare loop.

A second interval resamples whole cycles of the benchmark's Williams design (``bench/design.py``:
18 rounds for its nine configurations), not single rounds. Rounds next to each other share the
host's state of the moment and a cycle balances who runs before whom; were either to matter, the
rounds would not be independent and the first interval would be too narrow. Neither interval
covers what moves a cell from one lease or host to the next (README, "The version matrix").
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree

from bench import emit  # noqa: E402  (one print-and-write for result tables)
from bench.design import williams  # noqa: E402

CONFIG = "audit(cuda) pointer"  # the default detector's row, as in the README's tables


def paired_ratios(rounds_ms: dict, config: str = CONFIG, base: str = "bare") -> list[float]:
    """The configuration's time over the ``base`` loop's (bare), round by round."""
    return [x / b for x, b in zip(rounds_ms[config], rounds_ms[base])]


def interval(ordered: list[float]) -> tuple[float, float]:
    """The 2.5th and 97.5th percentile of resampled statistics, already sorted."""
    n = len(ordered)
    return ordered[int(0.025 * (n - 1))], ordered[int(0.975 * (n - 1))]


def bootstrap(ratios: list[float], target: float, resamples: int = 4000, seed: int = 0,
              block: int = 1):
    """(median, 2.5th and 97.5th percentile of the resampled medians, share at or under target).
    ``block``: resample runs of that many consecutive rounds, each kept whole (it must divide
    the rounds); 1 draws single rounds, with the same draws as before blocks existed."""
    if not ratios:
        raise ValueError("no rounds to resample")
    if block < 1 or len(ratios) % block:
        raise ValueError(f"{len(ratios)} rounds do not split into blocks of {block}")
    rng = random.Random(seed)
    blocks = [ratios[i:i + block] for i in range(0, len(ratios), block)]
    meds = sorted(statistics.median([x for b in rng.choices(blocks, k=len(blocks)) for x in b])
                  for _ in range(resamples))
    lo, hi = interval(meds)
    return statistics.median(ratios), lo, hi, sum(m <= target for m in meds) / resamples


def cycle(doc: dict, workload: str) -> int:
    """Rounds in one cycle of the design the workload's timed rounds followed: the Williams rows
    for as many configurations as its first round ran."""
    orders = doc.get("round_orders", {}).get(workload)
    if not orders:
        raise ValueError(f"{workload}: no round_orders in the benchmark's JSON")
    return len(williams(len(orders[0])))


def table(paths: list[str], target: float) -> list[str]:
    md = [f"# The overhead cells' medians and their 95% bootstrap intervals (target ≤{target}×)", "",
          "`python tools/overhead_ci.py` over " + ", ".join(f"`{p}`" for p in paths) + ": the "
          f"`{CONFIG}` row, each round's time over the bare loop of the same round; the rounds "
          "resampled with replacement 4,000 times (seed 0). The last two columns resample whole "
          "cycles of the design instead (`bench/design.py`), in the order the rounds ran.", "",
          "| torch | commit | workload | rounds | median | 95% interval | resampled medians ≤ "
          "target | cycles × rounds | 95% interval, cycles resampled |",
          "|---|---|---|---|---|---|---|---|---|"]
    for path in paths:
        with open(path) as fh:
            doc = json.load(fh)
        commit = _commit(path)
        for workload, rounds_ms in doc["rounds_ms"].items():
            ratios = paired_ratios(rounds_ms)
            med, lo, hi, share = bootstrap(ratios, target)
            rows = cycle(doc, workload)
            _, clo, chi, _ = bootstrap(ratios, target, block=rows)
            md.append(f"| {doc['torch']} | {commit} | {workload} | {len(ratios)} | {med:.3f} | "
                      f"[{lo:.3f}, {hi:.3f}] | {share:.0%} | {len(ratios) // rows} × {rows} "
                      f"rounds | [{clo:.3f}, {chi:.3f}] |")
    return md


def _commit(path: str) -> str:
    """The commit the folder's ``gpu.txt`` names (``commit SHA dirty N``), or "?"."""
    try:
        with open(path.rsplit("/", 1)[0] + "/gpu.txt") as fh:
            first = fh.readline().split()
    except OSError:
        return "?"
    return first[1] if len(first) > 1 and first[0] == "commit" else "?"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="*")
    ap.add_argument("--target", type=float, default=1.05)
    ap.add_argument("--out")
    ap.add_argument("--check", metavar="FILE",
                    help="exit 1 unless FILE holds what this would write (the committed table is "
                         "regenerated from the committed evidence)")
    a = ap.parse_args(argv)
    paths = a.files or sorted(glob.glob("reports/gpu/*/overhead-*.json"))
    if not paths:
        print("overhead_ci: no overhead-*.json given or found under reports/gpu/", file=sys.stderr)
        return 2
    lines = table(paths, a.target)
    if a.check:
        try:
            with open(a.check) as fh:
                same = fh.read() == "\n".join(lines) + "\n"
        except FileNotFoundError:
            same = False  # not written yet: as stale as a wrong one
        print(f"{a.check}: " + ("up to date with the evidence" if same else
                                "stale: run python tools/overhead_ci.py --out " + a.check))
        return 0 if same else 1
    emit(lines, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
