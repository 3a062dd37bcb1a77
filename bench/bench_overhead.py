"""Audit overhead, measured side by side in one run (not a test).

    python bench/bench_overhead.py --out DIR

Three workloads: 2,000 tiny kernels (launch-bound, the worst case for any per-op hook), 100
calls of the sync-free merge ``emb[cpu_mask] = rows``, and a training step of a 4-layer
TransformerEncoder (d=512) with AdamW on a batch of 8x128. Each configuration is timed in
interleaved rounds (wall clock around the loop, CUDA synchronised before and after, the region
opened and closed inside the timing) and reported as the median over rounds and as a ratio to
the bare loop of the same rounds.

Order matters: once torch.profiler has run in a process, CUPTI cannot be subscribed again (one
subscriber per process), so every cuda-detector configuration is timed before any profiler one.
The cuda detector is timed with both ways of telling pageable from pinned host memory
(``activity``: CUPTI MEMCPY records; ``pointer``: cudaPointerGetAttributes at region exit).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import syncguard  # noqa: E402
from bench.workloads import mask_merges, tiny_kernels  # noqa: E402


def tiny_loop(st):
    tiny_kernels(st, 2000)


def merge_loop(st):
    mask_merges(st, 100)


@contextlib.contextmanager
def bare():
    yield


def prof(acts, stack):
    @contextlib.contextmanager
    def cm():
        with profile(activities=acts, with_stack=stack):
            yield
    return cm


def timed(work, cm, st):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with cm():
        work(st)
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def train_step_workload():
    model = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True), 4).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = torch.randn(8, 128, 512, device="cuda")

    def step(st):
        opt.zero_grad(set_to_none=True)
        model(data).square().mean().backward()
        opt.step()
    return step


def cuda_with(hostmem):
    from syncguard.detectors.cuda import HUB

    @contextlib.contextmanager
    def cm():
        saved, HUB.hostmem = HUB.hostmem, hostmem
        try:
            with syncguard.audit(("cuda",)) as rep:
                yield rep
            assert rep.detectors == ("cuda",), rep.notes
        finally:
            HUB.hostmem = saved
    return cm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--rounds", type=int, default=11)
    a = ap.parse_args()
    st = {"y": torch.zeros(16, device="cuda")}
    emb = torch.randn(8192, 1024, device="cuda", dtype=torch.bfloat16)
    mask = torch.rand(8192) < 0.5
    st.update(emb=emb, mask=mask, rows=torch.randn(int(mask.sum()), 1024, device="cuda",
                                                    dtype=torch.bfloat16))
    # Phase 1: no profiler has run yet, so the cuda detector can subscribe.
    before = {
        "bare": bare,
        "audit() default = cuda (activity)": cuda_with("activity"),
        "audit(cuda) pointer": cuda_with("pointer"),
        "audit(debug,trace) fallback": lambda: syncguard.audit(("debug", "trace")),
    }
    # Phase 2: profiler configurations (after them CUPTI stays held by Kineto).
    after = {
        "bare (again)": bare,
        "profiler cpu+cuda, stacks": prof([ProfilerActivity.CPU, ProfilerActivity.CUDA], True),
        "audit(debug,trace,profile)": lambda: syncguard.audit(("debug", "trace", "profile")),
    }
    workloads = (("2000 tiny kernels", tiny_loop), ("100 merges", merge_loop),
                 ("transformer training step", train_step_workload()))
    results = {w: {} for w, _ in workloads}
    for configs in (before, after):
        for wname, work in workloads:
            for cm in configs.values():  # warm-up of every path
                timed(work, cm, st)
            times = {k: [] for k in configs}
            for _ in range(a.rounds):
                for k, cm in configs.items():
                    times[k].append(timed(work, cm, st))
            results[wname].update(times)
    table = {}
    for wname, times in results.items():
        base = statistics.median(times["bare"])
        table[wname] = {k: {"median_ms": round(statistics.median(v) * 1e3, 3),
                            "ratio": round(statistics.median(v) / base, 3),
                            "spread_ms": round((max(v) - min(v)) * 1e3, 3)} for k, v in times.items()}
    ver = torch.__version__.split("+")[0]
    doc = {"schema_version": 1, "kind": "syncguard-bench-overhead", "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0), "rounds": a.rounds, "results": table}
    with open(os.path.join(a.out, f"overhead-{ver}.json"), "w") as f:
        json.dump(doc, f, indent=1)
    md = [f"# Audit overhead · {doc['gpu']} · torch {torch.__version__} · median of {a.rounds} "
          "interleaved rounds", ""]
    for wname, rows in table.items():
        md += [f"## {wname}", "", "| configuration | median ms | × bare |", "|---|---|---|"]
        md += [f"| {k} | {v['median_ms']} | {v['ratio']} |" for k, v in rows.items()]
        md.append("")
    with open(os.path.join(a.out, f"overhead-{ver}.md"), "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
