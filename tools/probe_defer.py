"""Probe (GPU, not a test): the C callback keeping an async host-to-device copy at its EXIT
(deferring, the default) against keeping it at its ENTER, as every other call, in one process.

    python tools/probe_defer.py [--rounds 96] [--out DIR]
    python tools/probe_defer.py --render DIR/defer-<torch>.json   (its .md again, no GPU)

Why: torch 2.8.0's 100 merges are the one overhead cell over 1.05x (reports/gpu/overhead-ci.md).
Each merge makes a pageable host-to-device copy and a stream sync waiting for it. Kept at ENTER,
the copy's bookkeeping (the GIL, the regions, the user's site: ~0.5 us) runs before the copy
starts; kept at EXIT, it runs while the transfer the copy queued is in flight, which the stream
sync then waits for anyway.

Workloads (bench/workloads.py's tensors): 100 merges through CPU integer indices (on every
torch a pageable host-to-device copy and a stream sync per merge, torch 2.8.0's merge pattern);
the 100 merges of the overhead benchmark (torch >= 2.9: sync-free, one async copy each); its
training step; 100 ``.item()`` calls (a copy from the device and a sync: kept at ENTER either
way, the control). Each round runs bare, ``audit(cuda)`` deferring and ``audit(cuda)`` at
ENTER, and a C no-op callback subscribed on the detector's ids with no region (CUPTI's own
dispatch: the floor under both), in bench/design.py's Williams order. Each cell is the median
over rounds of the loop's time over the bare loop of the same round (the region's entry and
exit inside the timing, as in the overhead benchmark), printed and written to
DIR/defer-<torch>.{json,md} with every round.
"""
import collections
import contextlib
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this tree

import torch  # noqa: E402

import syncguard  # noqa: E402
from bench import emit, emit_doc, gpu_probe_args  # noqa: E402
from bench.bench_overhead import cupti_raw  # noqa: E402
from bench.design import round_order, whole_cycles  # noqa: E402
from bench.workloads import mask_merges, merge_state, train_step  # noqa: E402
from overhead_ci import bootstrap  # noqa: E402  (tools/, this script's folder)
from syncguard.detectors.cuda import HUB  # noqa: E402
from syncguard.provenance import git_state  # noqa: E402


@contextlib.contextmanager
def bare():
    yield


def audited(deferring: bool):
    @contextlib.contextmanager
    def cm():
        was = HUB.fast.deferring(deferring)
        try:
            with syncguard.audit(("cuda",)) as rep:
                yield
            assert rep.detectors == ("cuda",), rep.notes
        finally:
            HUB.fast.deferring(was)
    return cm


def main():
    a = gpu_probe_args(96)
    if HUB.fast is None:
        raise SystemExit(f"the C callback is not in use here: {HUB.callback}")
    st = merge_state()
    indexed = dict(st, mask=st["mask"].nonzero().squeeze(1))  # CPU int64 indices
    step = train_step()
    scalar = torch.ones((), device="cuda")

    def items():
        for _ in range(100):
            scalar.item()
    workloads = {"100 merges through CPU indices (copy + sync each)": lambda: mask_merges(indexed, 100),
                 "100 merges (the overhead benchmark's)": lambda: mask_merges(st, 100),
                 "transformer training step": step,
                 "100 .item() (copy from the device + sync; the control)": items}
    configs = {"bare": bare, "audit(cuda), deferring (default)": audited(True),
               "audit(cuda), kept at ENTER": audited(False),
               # CUPTI's own dispatch on the detector's ids, no region: the floor under both
               "cupti: detector's ids, C no-op callback": cupti_raw("c", "detector")}
    rounds = whole_cycles(a.rounds, len(configs))
    rows, every, seen = {}, {}, {}
    for wname, work in workloads.items():
        times = {k: [] for k in configs}
        for cm in list(configs.values()) * 2:  # warm-up
            with cm():
                work()
                torch.cuda.synchronize()
        for r in range(rounds):
            for k, cm in round_order(configs, r):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                with cm():
                    work()
                    torch.cuda.synchronize()
                times[k].append(time.perf_counter() - t0)
        every[wname] = {k: [round(x * 1e3, 4) for x in v] for k, v in times.items()}
        with syncguard.audit(("cuda",)) as rep:  # what the region sees of one loop
            work()
            torch.cuda.synchronize()
        seen[wname] = dict(collections.Counter(f"{e.kind} ({e.api})" for e in rep.syncs))
        cells = {}
        for k, v in times.items():
            ratios = [x / b for x, b in zip(v, times["bare"])]
            q1, _, q3 = statistics.quantiles(ratios, n=4)
            cells[k] = {"median_ms": round(statistics.median(v) * 1e3, 3),
                        "ratio": round(statistics.median(ratios), 4),
                        "ratio_q1": round(q1, 4), "ratio_q3": round(q3, 4)}
        on, off = times["audit(cuda), deferring (default)"], times["audit(cuda), kept at ENTER"]
        cells["deferring over kept at ENTER, per round"] = {
            "ratio": round(statistics.median([x / y for x, y in zip(on, off)]), 4)}
        rows[wname] = cells
    doc = {"kind": "syncguard-probe-defer", "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0), "callback": HUB.callback,
           "commit": (git_state(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) or {}).get("commit"),
           "rounds": rounds, "rows": rows, "syncs_seen": seen, "rounds_ms": every}
    emit_doc(doc, markdown(doc), a.out, f"defer-{doc['torch'].split('+')[0]}")


def markdown(doc: dict) -> list[str]:
    """The result table of a probe's JSON (also ``--render FILE.json``: the .md written again
    beside it, from the JSON alone)."""
    md = [f"# An async host-to-device copy kept at EXIT or at ENTER · {doc['gpu']} · torch "
          f"{doc['torch']} · commit {doc['commit']}", "",
          f"`tools/probe_defer.py`; {doc['rounds']} rounds (Williams design, one process, one "
          "build); × bare: median over rounds of the loop over the same round's bare loop "
          "(region entry and exit inside).", "",
          "| workload | configuration | median ms | × bare [quartiles] |", "|---|---|---|---|"]
    for w, r in doc["rows"].items():
        for k, v in r.items():
            if "median_ms" in v:
                md.append(f"| {w} | {k} | {v['median_ms']} | {v['ratio']} "
                          f"[{v['ratio_q1']}, {v['ratio_q3']}] |")
            else:
                on, off = (doc["rounds_ms"][w][c] for c in ("audit(cuda), deferring (default)",
                                                            "audit(cuda), kept at ENTER"))
                _, lo, hi, _ = bootstrap([x / y for x, y in zip(on, off)], 1.0)
                md.append(f"| {w} | {k} | | {v['ratio']} (95% interval [{lo:.4f}, {hi:.4f}]) |")
    md += ["", "The intervals: the rounds resampled whole 4,000 times (seed 0; "
           "tools/overhead_ci.py's bootstrap).", ""]
    md += ["What one audited loop of each workload reported (kind (api): count):", ""]
    md += [f"- {w}: {', '.join(f'{k}: {n}' for k, n in s.items()) or 'no sync'}"
           for w, s in doc["syncs_seen"].items()]
    return md


def render(path: str) -> None:
    with open(path) as fh:
        doc = json.load(fh)
    emit(markdown(doc), os.path.splitext(path)[0] + ".md")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--render"] and len(sys.argv) == 3:
        render(sys.argv[2])
    else:
        main()
