"""Probe (GPU, not a test): the cuda detector's second design (issue #44, docs/cuda-detector.md).

    python lab/probe_routing.py [--out DIR] [--n 2000] [--jobs 6]   # DIR/routing-<torch>.{json,md}

Part 1, costs, in this process, after a warm-up: an empty ``audit()`` entered and left (median
of ``n``, perf_counter_ns around the ``with``); one ``.item()`` alone and the same ``.item()``
inside its own ``audit()``, alternating, median of ``n`` each; the empty region again while
another Python thread keeps syncing (its callbacks find no route: no GIL taken).

Part 2, torch.profiler beside the detector: each scenario in its own process (this script with
``--scenario``), once with syncguard's regions and once with the same blocks left bare. Where
the profiler runs against the regions: ``before`` (profiler, then a region), ``around``
(profiler around a region, then a region), ``inside`` (a region around the profiler, then a
region), ``after`` (a region, the profiler, a region); each with no other thread, and with
another Python thread alive that keeps calling ``torch.cuda.synchronize()`` (a
cudaDeviceSynchronize, which the workload never calls, and no kernel). Recorded per process: the
profiler's error (an exception at its start or stop) and exit code; the profiler trace's kernel
names and its runtime calls of the workload (cudaLaunchKernel, cudaMemcpyAsync,
cudaStreamSynchronize), counted; what each region's report says (detectors, reason, syncs); the
hub's state. "same trace" compares the counts with the bare process of the same scenario. And
``after`` with ``TEARDOWN_CUPTI=1`` (Kineto lets CUPTI go after the trace, at a later runtime
call): whether a later region takes CUPTI back.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time

WATCHED = ("cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize")
POSITIONS = ("before", "around", "inside", "after")


def _work(x, steps: int = 5) -> float:
    s = 0.0
    for _ in range(steps):
        s += float((x @ x).max())  # a kernel or two, a D2H copy and a stream sync per step
    return s


def _trace_counts(prof) -> dict:
    kernels, calls = collections.Counter(), collections.Counter()
    for e in prof.events():
        dev = str(getattr(e, "device_type", ""))
        if dev.endswith("CUDA"):
            kernels[e.name] += 1
        elif e.name in WATCHED or any(e.name.startswith(w + "_") for w in WATCHED):
            calls[e.name.split("_v")[0]] += 1
    return {"kernels": dict(sorted(kernels.items())), "calls": dict(sorted(calls.items()))}


def scenario(position: str, thread: bool, audited: bool) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    import syncguard
    from syncguard.detectors.cuda.hub import HUB

    out: dict = {"position": position, "thread": thread, "audited": audited, "regions": []}
    x = torch.randn(256, 256, device="cuda")
    _work(x)
    torch.cuda.synchronize()
    stop = threading.Event()

    def noise():
        while not stop.is_set():
            torch.cuda.synchronize()
            time.sleep(0.001)

    th = threading.Thread(target=noise, daemon=True) if thread else None
    if th:
        th.start()

    @contextlib.contextmanager
    def region(name):
        if not audited:
            yield
            return
        with syncguard.audit() as rep:
            yield
        out["regions"].append({"name": name, "detectors": list(rep.detectors),
                               "reason": rep.detector_reason, "syncs": len(rep.syncs),
                               "notes": [n for n in rep.notes if "profiler" in n or "CUPTI" in n]})

    @contextlib.contextmanager
    def profiler():
        try:
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                yield
            out["trace"] = _trace_counts(prof)
            out["profiler_error"] = None
        except Exception as e:  # what the issue saw: an INTERNAL ASSERT at the profiler's stop
            out["profiler_error"] = f"{type(e).__name__}: {str(e)[:300]}"

    try:
        if position == "before":
            with profiler():
                _work(x)
            with region("after the profiler"):
                _work(x)
        elif position == "around":
            with profiler():
                with region("inside the profiler"):
                    _work(x)
            with region("after the profiler"):
                _work(x)
        elif position == "inside":
            with region("around the profiler"):
                with profiler():
                    _work(x)
            with region("after the profiler"):
                _work(x)
        else:  # after
            with region("before the profiler"):
                _work(x)
            with profiler():
                _work(x)
            _work(x)  # a runtime call after the trace: where Kineto tears CUPTI down (TEARDOWN_CUPTI=1)
            with region("after the profiler"):
                _work(x)
            with region("second after the profiler"):
                _work(x)
    finally:
        stop.set()
        if th:
            th.join()
    out["hub"] = {"subscribed": HUB.subscribed, "handed": HUB.handed, "hand_overs": HUB.hand_overs,
                  "shared": HUB.shared, "weaker": HUB.weaker, "callback": HUB.callback}
    return out


def costs(n: int) -> dict:
    import torch

    import syncguard

    x = torch.randn(64, device="cuda")
    for _ in range(200):
        with syncguard.audit():
            x.sum().item()
    with syncguard.audit() as rep:
        pass
    detectors = list(rep.detectors)

    def empty_us(k):
        ts = []
        for _ in range(k):
            t0 = time.perf_counter_ns()
            with syncguard.audit():
                pass
            ts.append((time.perf_counter_ns() - t0) / 1e3)
        return ts

    empty = empty_us(n)
    alone, inside = [], []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        x.sum().item()
        t1 = time.perf_counter_ns()
        with syncguard.audit():
            x.sum().item()
        t2 = time.perf_counter_ns()
        alone.append((t1 - t0) / 1e3)
        inside.append((t2 - t1) / 1e3)
    stop = threading.Event()

    def noise():
        y = torch.ones(16, device="cuda")
        while not stop.is_set():
            float(y.sum())
            time.sleep(0.0002)

    th = threading.Thread(target=noise, daemon=True)
    th.start()
    try:
        busy = empty_us(n)
    finally:
        stop.set()
        th.join()
    med = lambda v: round(statistics.median(v), 2)  # noqa: E731
    from syncguard.detectors.cuda.hub import HUB

    return {"n": n, "detectors": detectors, "callback": HUB.callback,
            "empty_region_us": med(empty), "empty_region_q1_q3_us": [
                round(q, 2) for q in statistics.quantiles(empty, n=4)[::2]],
            "item_alone_us": med(alone), "item_in_region_us": med(inside),
            "region_with_item_minus_item_us": round(med(inside) - med(alone), 2),
            "empty_region_beside_a_syncing_thread_us": med(busy)}


def _one(args) -> dict:
    position, thread, audited, env = args
    cmd = [sys.executable, os.path.abspath(__file__), "--scenario", position,
           "--thread", str(int(thread)), "--audited", str(int(audited))]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=240)
    got = {"position": position, "thread": thread, "audited": audited, "env": env}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            got = {**json.loads(line[7:]), "env": env}
    got["rc"], got["seconds"] = p.returncode, round(time.time() - t0, 1)
    if p.returncode:
        got["stderr_tail"] = p.stderr[-1500:]
    return got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--scenario")
    ap.add_argument("--thread", type=int, default=0)
    ap.add_argument("--audited", type=int, default=1)
    a = ap.parse_args()
    if a.scenario:
        print("RESULT " + json.dumps(scenario(a.scenario, bool(a.thread), bool(a.audited))), flush=True)
        return
    import torch

    runs = [(p, t, au, {}) for p in POSITIONS for t in (False, True) for au in (False, True)]
    runs += [("after", False, au, {"TEARDOWN_CUPTI": "1"}) for au in (False, True)]
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        done = list(pool.map(_one, runs))
    bare = {(d["position"], d["thread"], json.dumps(d["env"])): d for d in done if not d["audited"]}
    for d in done:
        if d["audited"]:
            b = bare.get((d["position"], d["thread"], json.dumps(d["env"])), {})
            d["same_trace_as_bare"] = (d.get("trace") is not None and d.get("trace") == b.get("trace"))
    cost = costs(a.n)
    ver = torch.__version__.split("+")[0]
    doc = {"kind": "syncguard-probe-routing", "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0), "commit": os.environ.get("SYNCGUARD_GIT_COMMIT"),
           "costs": cost, "scenarios": done}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"routing-{ver}.json"), "w") as f:
        json.dump(doc, f, indent=1)
    lines = [f"# probe_routing: torch {torch.__version__}, {doc['gpu']}, commit {doc['commit']}", "",
             "## Costs (median µs)", ""] + [f"- {k}: {v}" for k, v in cost.items()] + [
             "", "## Profiler scenarios (audited processes)", "",
             "| position | other thread | env | rc | profiler error | same trace as bare | regions: detectors (syncs) | hand-overs | weaker |",
             "|---|---|---|---|---|---|---|---|---|"]
    for d in done:
        if not d["audited"]:
            continue
        regs = "; ".join(f"{r['name']}: {','.join(r['detectors'])} ({r['syncs']})" for r in d.get("regions", []))
        hub = d.get("hub", {})
        lines.append(f"| {d['position']} | {d['thread']} | {d['env'] or ''} | {d['rc']} | "
                     f"{d.get('profiler_error')} | {d.get('same_trace_as_bare')} | {regs} | "
                     f"{hub.get('hand_overs')} | {hub.get('weaker')} |")
    errs = sum(1 for d in done if d.get("profiler_error") or d["rc"])
    lines += ["", f"Processes with a profiler error or a non-zero exit: {errs} of {len(done)} "
              f"(bare ones included)."]
    with open(os.path.join(a.out, f"routing-{ver}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
