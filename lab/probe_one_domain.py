"""Probe (H200, not a test): what the default detector would cost watching one CUPTI domain.

    python lab/probe_one_domain.py [--rounds 216] [--out DIR]    # DIR/one-domain-<torch>.{json,md}

Why: issue 12 asks the ``cuda`` detector to watch sync and copy APIs at both levels, the CUDA
runtime's and the driver's, deduplicated. A runtime call fires the driver call's callbacks under
it too, and CUPTI dispatches each (reports/probes/cupti-domains-d900b3e/ measured that dispatch
alone with a no-op callback). On 100 merges the default's overhead is within a point or two of
the issue's 1.05x target on every torch, by host (reports/probes/design-72b7692/). Watching one
domain is the one choice left that could buy about a point, and it is the issue owner's to make.
This probe measures the detector itself, not a no-op, under each choice, for that decision. The
library stays as it is.

Configurations, in a Williams design (bench/design.py), each audited one with the C callback:
``bare``; ``audit(cuda)`` as shipped (runtime and driver ids); the same with the driver's ids
only; the same with the runtime's ids only. The hub's id table is swapped and the C module
configured again before each audited loop, outside the timing, for every audited configuration
alike (``configure`` empties the C module's own site slots; the sites stay cached in Python). A
round's ratio is the loop's time over the bare loop of that round; medians over rounds. The
one-domain rows are also read against the shipped detector, round by round, with a 95% bootstrap
interval (``tools/overhead_ci.bootstrap``).
"""
from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))  # for overhead_ci

from overhead_ci import bootstrap, paired_ratios  # noqa: E402

SHIPPED = "audit(cuda), both domains (shipped)"
DOMAINS = {SHIPPED: (1, 2), "audit(cuda), driver ids only": (1,),
           "audit(cuda), runtime ids only": (2,)}


def run(rounds: int) -> dict:
    import torch

    from bench import bench_overhead as bo
    from bench.design import round_order, whole_cycles
    from syncguard.detectors.cuda.detector import HUB
    from syncguard.reporting.provenance import git_state

    why = HUB.unavailable()
    if why:
        raise SystemExit(f"cuda detector unavailable: {why}")
    full = dict(HUB.table)
    ids = {name: sum(1 for d, _ in full if d in doms) for name, doms in DOMAINS.items()}

    def select(name):
        """The hub's ids for ``name``, and the C module configured on them: between loops,
        outside the timing, before every audited loop alike."""
        HUB.table = {k: v for k, v in full.items() if k[0] in DOMAINS[name]}
        HUB.use_fast()

    configs = {"bare": bo.bare, **{name: bo.cuda_with("pointer", name) for name in DOMAINS}}
    st = bo.loop_state()
    loops = bo.workloads()
    rounds = whole_cycles(rounds, len(configs))
    out = {}
    for wname, work in loops:
        for k, cm in configs.items():  # warm-up of every path
            if k in DOMAINS:
                select(k)
            bo.timed(work, cm, st)
        times = {k: [] for k in configs}
        for r in range(rounds):
            for k, cm in round_order(configs, r):
                if k in DOMAINS:
                    select(k)
                times[k].append(round(bo.timed(work, cm, st) * 1e3, 4))
        out[wname] = times
        print(f"{wname}: " + "; ".join(f"{k} {statistics.median(paired_ratios(times, k)):.3f}x"
                                       for k in DOMAINS), flush=True)
    select(SHIPPED)
    git = git_state(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) or {}
    return {"schema_version": 1, "kind": "syncguard-probe-one-domain", "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(0), "callback": HUB.callback,
            "commit": git.get("commit"), "dirty": git.get("dirty"), "rounds": rounds,
            "ids": ids, "rounds_ms": out}


def render(doc: dict) -> list[str]:
    from bench import probe_title

    lines = [probe_title("The default detector watching one CUPTI domain", doc), "",
             f"`tools/probe_one_domain.py --rounds {doc['rounds']}`; {doc['callback']}; "
             f"{doc['rounds']} rounds in a Williams design. Ids enabled: "
             + ", ".join(f"{k}: {n}" for k, n in doc["ids"].items()) + ". × bare: median over "
             "rounds of the loop over the bare loop of that round [quartiles]. × shipped: the "
             "same over the shipped detector's loop of that round, with a 95% bootstrap interval "
             "(4,000 resamples of the rounds, seed 0).", "",
             "| workload | configuration | median ms | × bare | × shipped [95% interval] |",
             "|---|---|---|---|---|"]
    for wname, times in doc["rounds_ms"].items():
        for k in times:
            r = paired_ratios(times, k)
            q1, _, q3 = statistics.quantiles(r, n=4)
            vs = ""
            if k not in ("bare", SHIPPED):
                med, lo, hi, _ = bootstrap(paired_ratios(times, k, SHIPPED), 1.0)
                vs = f"{med:.3f} [{lo:.3f}, {hi:.3f}]"
            lines.append(f"| {wname} | {k} | {statistics.median(times[k]):.3f} | "
                         f"{statistics.median(r):.3f} [{q1:.3f}, {q3:.3f}] | {vs} |")
    return lines


def main(argv=None) -> int:
    from bench import probe_main

    return probe_main(argv, run, render, "one-domain", "--rounds", 216)


if __name__ == "__main__":
    sys.exit(main())
