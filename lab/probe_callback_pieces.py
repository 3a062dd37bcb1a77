"""Probe (H200, not a test): where the C callback's time goes on 100 merges, under real CUDA calls.

    python lab/probe_callback_pieces.py [--rounds 41] [--out DIR]

The overhead benchmark puts the detector's own callback at ~1.3 us per sync-free merge on the
H200's host, on top of CUPTI's ~1.1 us (reports/probes/drop-pinned-8ef9189/). The CPU benchmark
puts the same callback at ~0.5 us per copy, warm. This probe asks the C callback to time its own
pieces (``_cuptifast.timing``: a clock read before and after each piece, so the sum is above
the untimed cost) inside ``audit(cuda)`` regions around 100 merges, in two conditions, round by
round:

* ``cold``: 2,000 tiny kernels run before the region, as in the benchmark's rotation, where other
  configurations run between two audited loops;
* ``warm``: the audited loop right after another audited loop.

It prints ns per merge for each piece (a merge makes one kept copy: a runtime ENTER and EXIT that
keep it, and the driver call's ENTER and EXIT nested under it), and ``--out`` writes
``callback-pieces-<torch>.json`` and ``.md``.
"""
import argparse
import json
import os
import sys

import torch

import syncguard
from syncguard.detectors.cuda.detector import HUB

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree's bench/
from bench.workloads import mask_merges, merge_state, tiny_kernels  # noqa: E402

MERGES = 100


def audited(st):
    with syncguard.audit(("cuda",)) as rep:
        mask_merges(st, MERGES)
        torch.cuda.synchronize()
    assert rep.detectors == ("cuda",), rep.notes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--out")
    a = ap.parse_args()
    why = HUB.unavailable()
    assert why is None and HUB.fast is not None, (why, HUB.callback)
    fast = HUB.fast
    st = {"y": torch.zeros(16, device="cuda"), **merge_state()}
    for _ in range(5):  # warm-up: compiled paths, caches, the first subscription
        audited(st)
        tiny_kernels(st)
    totals = {"cold": {}, "warm": {}}
    for _ in range(a.rounds):
        for cond in ("cold", "warm"):
            if cond == "cold":
                tiny_kernels(st)
                torch.cuda.synchronize()
            else:
                audited(st)
            fast.timing(True)
            audited(st)
            for piece, (ns, n) in fast.timing(False).items():
                s, c = totals[cond].get(piece, (0, 0))
                totals[cond][piece] = (s + ns, c + n)
    per = {cond: {p: {"ns_per_merge": round(ns / a.rounds / MERGES, 1),
                      "times_per_merge": round(n / a.rounds / MERGES, 2)}
                  for p, (ns, n) in t.items()} for cond, t in totals.items()}
    ver = torch.__version__.split("+")[0]
    doc = {"kind": "syncguard-probe-callback-pieces", "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0), "rounds": a.rounds, "merges": MERGES,
           "commit": os.environ.get("SYNCGUARD_GIT_COMMIT", ""), "pieces": per}
    md = [f"# The C callback's pieces on 100 merges · {doc['gpu']} · torch {torch.__version__} · "
          f"{a.rounds} rounds", "",
          "ns per merge (one kept copy: 2 kept callbacks and 2 nested ones), summed over the "
          "region's callbacks; each piece timed by the callback itself (two clock reads per "
          "piece, included).", "",
          "| piece | cold: ns per merge | cold: times per merge | warm: ns per merge | warm: times per merge |",
          "|---|---|---|---|---|"]
    for p in per["cold"]:
        c, w = per["cold"][p], per["warm"][p]
        md.append(f"| {p} | {c['ns_per_merge']} | {c['times_per_merge']} | {w['ns_per_merge']} "
                  f"| {w['times_per_merge']} |")
    text = "\n".join(md) + "\n"
    print(text)
    if a.out:
        with open(os.path.join(a.out, f"callback-pieces-{ver}.json"), "w") as f:
            json.dump(doc, f, indent=1)
        with open(os.path.join(a.out, f"callback-pieces-{ver}.md"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
