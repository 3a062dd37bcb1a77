"""The profiler scenarios' program: a ``torch.profiler`` session before, around, inside or after
a syncguard region, with or without another Python thread alive; each run in a fresh process.

    python -m tests.gpu.profiler_scenarios WHERE THREAD AUDITED OUT.json   # one process
    (WHERE: before|around|inside|after; THREAD, AUDITED: 0|1)

The same program runs twice per scenario: once with its regions (``AUDITED=1``) and once with
every region replaced by nothing (``AUDITED=0``), which is the ground truth of what the
profiler's trace holds. :func:`judge` compares the two; tests/gpu/test_profiler_scenarios.py
asserts on it and bench/detector_summary.py counts it (one code path for both).

The other thread does CUDA work before the scenario starts, stays alive through it, does CUDA
work again when told to finish, and is joined before the process exits (a daemon thread doing
CUDA work at interpreter exit aborts the process with or without syncguard, NOTES). So no kernel
of it falls inside a profiler session, and both runs' traces hold the same work.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

WHERE = ("before", "around", "inside", "after")
SCENARIOS = tuple((w, t) for w in WHERE for t in (False, True))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: the runtime calls compared between the two runs: the syncs and copies of the profiler's trace
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
              "cudaMemcpyAsync", "cudaMemcpy", "cudaFree")


def name(where: str, thread: bool) -> str:
    return f"{where}-{'thread' if thread else 'alone'}"


def work(torch, x) -> None:
    """Kernels, a scalar read (copy and stream sync), a blocking copy and a device sync."""
    y = x @ x
    y.sum().item()
    y[:4].cpu()
    torch.cuda.synchronize()


def trace_of(prof) -> dict:
    """What a profiler session recorded: GPU records by name (kernels and copies) and the
    runtime's sync and copy calls by name."""
    from torch.autograd import DeviceType

    events = prof.events()
    gpu = Counter(e.name for e in events if e.device_type == DeviceType.CUDA)
    calls = Counter(e.name for e in events if e.name in SYNC_CALLS)
    return {"gpu": dict(sorted(gpu.items())), "calls": dict(sorted(calls.items()))}


def region_record(report, lent: str | None) -> dict:
    """A region as the plugin records its test: the detectors, and the ``weaker`` mark made
    from them and from the cuda detector's ``weaker`` as it exited (``lent``)."""
    from syncguard.reporting.weaker import weaker_mark

    return {"detectors": list(report.detectors), "detector_reason": report.detector_reason,
            "notes": list(report.notes), "syncs": [e.kind for e in report.syncs],
            "weaker": weaker_mark(("auto",), report, lent),
            # a profiler started inside the region: CUPTI lent to it, the rest of the region
            # watched by sync-debug mode only
            "handed_over": bool(lent) and "cuda" in report.detectors}


def program(where: str, thread: bool, audited: bool) -> dict:
    """One scenario in this process; what the profiler raised or recorded, and each region."""
    import torch

    out: dict = {"scenario": name(where, thread), "audited": audited, "torch": torch.__version__,
                 "profiler_error": None, "trace": None, "regions": []}
    x = torch.randn(256, 256, device="cuda")
    work(torch, x)  # kernels loaded, cuBLAS set up: neither run's trace holds first-use calls
    if audited:
        import syncguard
        from syncguard import detectors as registry
    ready, finish = threading.Event(), threading.Event()

    def other():
        y = torch.randn(64, device="cuda")
        (y * 2).sum().item()
        ready.set()
        finish.wait(120)
        (y + 1).sum().item()

    t = threading.Thread(target=other, name="other") if thread else None
    if t is not None:
        t.start()
        ready.wait(60)

    def region(body):
        if not audited:
            return body()
        with syncguard.audit() as report:
            body()
        out["regions"].append(region_record(report, registry.get("cuda").weaker))

    def profiled(body):
        try:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                    torch.profiler.ProfilerActivity.CUDA]) as p:
                body()
            out["trace"] = trace_of(p)
        except Exception as e:  # what the scenario measures: the profiler must not raise
            out["profiler_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"

    def step():
        work(torch, x)

    try:
        if where == "before":
            profiled(step)
            region(step)
        elif where == "around":
            profiled(lambda: region(step))
        elif where == "inside":
            region(lambda: profiled(step))
        else:  # after
            region(step)
            profiled(step)
    finally:
        finish.set()
        if t is not None:
            t.join()
    return out


def run(where: str, thread: bool, audited: bool, path: str, timeout: float = 240) -> dict:
    """The program in a fresh process; its record, with the process's exit code."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "tests.gpu.profiler_scenarios", where,
                           str(int(thread)), str(int(audited)), path], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        data = {"scenario": name(where, thread), "audited": audited, "trace": None,
                "profiler_error": None, "regions": []}
    data["returncode"] = proc.returncode
    data["stderr_tail"] = proc.stderr.splitlines()[-8:]
    return data


def judge(bare: dict, audited: dict) -> dict:
    """One scenario's verdict: whether each process ended well, whether the profiler raised,
    whether its trace under syncguard holds what it holds without, and the regions that ran
    without the cuda detector (and of those, the ones that do not say why)."""
    without = [r for r in audited["regions"] if "cuda" not in r["detectors"]]
    return {
        "scenario": audited["scenario"],
        "returncodes": [bare["returncode"], audited["returncode"]],
        "profiler_error": audited["profiler_error"],
        "bare_profiler_error": bare["profiler_error"],
        "same_trace": bare["trace"] is not None and bare["trace"] == audited["trace"],
        "trace": {"bare": bare["trace"], "audited": audited["trace"]},
        "regions": len(audited["regions"]),
        "regions_without_cuda": len(without),
        "without_cuda_unnamed": sum(1 for r in without if not (r["weaker"] or {}).get("reason")),
        "without_cuda_reasons": [r["weaker"]["reason"] for r in without if r["weaker"]],
        "handed_over": sum(1 for r in audited["regions"] if r.get("handed_over")),
        "region_records": audited["regions"],
    }


def scenario(where: str, thread: bool, folder: str) -> dict:
    """Both runs of one scenario (ground truth first) and the verdict."""
    stem = os.path.join(folder, name(where, thread))
    bare = run(where, thread, False, f"{stem}-bare.json")
    audited = run(where, thread, True, f"{stem}-audited.json")
    verdict = judge(bare, audited)
    with open(f"{stem}-verdict.json", "w") as f:
        json.dump(verdict, f, indent=1)
    return verdict


def run_all(folder: str, workers: int = 4) -> list[dict]:
    """Every scenario, ``workers`` at a time (each in processes of its own)."""
    os.makedirs(folder, exist_ok=True)
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda s: scenario(*s, folder), SCENARIOS))


def summary(verdicts: list[dict]) -> dict:
    """What bench/detector_summary.py reports of the scenarios (issue 44's ``profiler``)."""
    return {"scenarios": len(verdicts),
            "profiler_errors": sum(1 for v in verdicts if v["profiler_error"]
                                   or v["returncodes"][1] != 0),
            "regions_without_cuda": sum(v["regions_without_cuda"] for v in verdicts),
            "regions_without_cuda_unnamed": sum(v["without_cuda_unnamed"] for v in verdicts),
            "regions_handed_over": sum(v.get("handed_over", 0) for v in verdicts),
            "traces_differing": sum(1 for v in verdicts if not v["same_trace"])}


def main(argv: list[str]) -> int:
    where, thread, audited, path = argv
    data = program(where, thread == "1", audited == "1")
    with open(path, "w") as f:
        json.dump(data, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
