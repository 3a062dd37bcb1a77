"""Race-mode overhead, measured side by side in one run (not a test).

    python bench/bench_races.py --out reports/bench-races.json [--rounds 7]

Workloads: 2,000 tiny kernels (launch-bound, the worst case: every op is dispatched through the
race detector's mode and every launch captures a stack), and two small merge loops (``emb[mask] =
rows`` with a CPU mask, and fresh pinned indices + a non-blocking upload + ``index_copy_``).

Configurations, each the median over rounds of wall time (CUDA synchronised before and after):

* ``bare``: before any RaceDetector ever started in this process;
* ``bare_after``: after one has started and stopped (``_gpu_trace`` stays active for good; this is
  the residual cost every later op pays);
* ``races``: inside ``RaceDetector().start()`` / ``stop()``.

``bare`` is timed first (it cannot come back once the trace is on); ``bare_after`` and ``races``
are interleaved round by round. Ratios are printed and written as JSON to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from bench.workloads import mask_merges, tiny_kernels  # noqa: E402
from syncguard.detectors.races import RaceDetector  # noqa: E402


def tiny(st):
    tiny_kernels(st, 2000)


def merge_mask(st):
    mask_merges(st, 50)


def merge_pinned(st):
    emb, rows_cpu, src = st["emb"], st["rows_cpu"], st["rows"]
    for _ in range(50):
        rows = rows_cpu.pin_memory()
        emb.index_copy_(0, rows.to("cuda", non_blocking=True), src)


WORKLOADS = {"tiny_2000": tiny, "merge_mask_50": merge_mask, "merge_pinned_50": merge_pinned}


def timed(work, st, races: bool) -> tuple[float, int]:
    torch.cuda.synchronize()
    det = RaceDetector() if races else None
    t0 = time.perf_counter()
    if det:
        det.start()
    try:
        work(st)
        torch.cuda.synchronize()
    finally:
        found = det.stop() if det else []
    return time.perf_counter() - t0, len(found)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="path of the JSON file to write")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"--rounds must be >= 1, got {args.rounds}")
    if not torch.cuda.is_available():
        print("bench_races: needs a CUDA device", file=sys.stderr)
        return 2

    g = torch.Generator().manual_seed(0)
    mask = torch.rand(8192, generator=g) < 0.25
    st = {"y": torch.zeros(1024, device="cuda"), "mask": mask,
          "emb": torch.randn(8192, 512, device="cuda"),
          "rows": torch.randn(int(mask.sum()), 512, device="cuda"),
          "rows_cpu": mask.nonzero().squeeze(1)}
    for work in WORKLOADS.values():  # warm-up: kernels, allocator, host allocator
        work(st)
    torch.cuda.synchronize()

    times = {name: {"bare": [], "bare_after": [], "races": []} for name in WORKLOADS}
    races_found = {name: 0 for name in WORKLOADS}
    for _ in range(args.rounds):
        for name, work in WORKLOADS.items():
            times[name]["bare"].append(timed(work, st, False)[0])
    timed(lambda s: None, st, True)  # turns the trace on for good
    for _ in range(args.rounds):
        for name, work in WORKLOADS.items():
            times[name]["bare_after"].append(timed(work, st, False)[0])
            t, n = timed(work, st, True)
            times[name]["races"].append(t)
            races_found[name] += n

    result = {"torch": torch.__version__, "device": torch.cuda.get_device_name(),
              "rounds": args.rounds, "workloads": {}}
    print(f"{'workload':18} {'bare ms':>9} {'after ms':>9} {'races ms':>9} "
          f"{'after/bare':>10} {'races/bare':>10} {'races/after':>11}")
    for name in WORKLOADS:
        med = {k: statistics.median(v) for k, v in times[name].items()}
        ratios = {"bare_after/bare": med["bare_after"] / med["bare"],
                  "races/bare": med["races"] / med["bare"],
                  "races/bare_after": med["races"] / med["bare_after"]}
        result["workloads"][name] = {"median_s": med, "ratios": ratios, "samples_s": times[name],
                                     "races_found": races_found[name]}
        print(f"{name:18} {med['bare'] * 1e3:9.2f} {med['bare_after'] * 1e3:9.2f} "
              f"{med['races'] * 1e3:9.2f} {ratios['bare_after/bare']:10.2f} "
              f"{ratios['races/bare']:10.2f} {ratios['races/bare_after']:11.2f}"
              + (f"  ({races_found[name]} races?!)" if races_found[name] else ""))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
