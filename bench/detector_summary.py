"""Issue 44's summary of the default detector, measured in one run (not a test).

    python bench/detector_summary.py --out DIR [--rounds 60] [--scenarios-from DIR]

writes ``DIR/detector-summary.json`` in exactly the issue's shape::

    {"commit": "...", "torch": "2.11.0+cu130", "region_enter_exit_us": <median, empty region>,
     "ratios": {"tiny_kernels": x, "merges_100": x, "training_step": x,
                "dataloader_step_regions": x},
     "profiler": {"scenarios": n, "profiler_errors": n, "regions_without_cuda": n}}

and beside it ``detector-summary-detail.json`` (every round, the bootstrap intervals, the
scenarios' verdicts) and ``detector-summary.md``.

* ``region_enter_exit_us``: an empty ``syncguard.audit()`` (the default detectors, as a user
  writes it) entered and left; the median over samples of 100 regions each, after a warm-up.
* ``ratios``: each workload bare and audited, in interleaved rounds ordered by a Williams design
  (bench/design.py), timed as the overhead benchmark times them (``bench_overhead.timed``: CUDA
  synchronised before and after, the region inside the timing); a round's ratio is the audited
  time over the bare time of the same round, the figure is the median over rounds, with a 95%
  bootstrap interval (tools/overhead_ci.py). The first three workloads are the overhead
  benchmark's, one region around each loop; ``dataloader_step_regions`` is
  ``bench.workloads.dataloader_steps``, one region per step, worker processes and the
  pin-memory thread alive.
* ``profiler``: the verdicts of the profiler scenarios (tests/gpu/profiler_scenarios.py, the
  program tests/gpu/test_profiler_scenarios.py runs): ``profiler_errors`` counts scenarios whose
  profiler raised under syncguard or whose process did not end well; ``regions_without_cuda``
  the regions that ran without the cuda detector (the detail names why, for each). With
  ``--scenarios-from DIR`` the verdicts the tests kept there (SYNCGUARD_SCENARIO_DIR) are read,
  else the scenarios run here first, before any timing.

Everything is timed in this process before any profiler runs in it (the scenarios run in
processes of their own).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools"))

import torch  # noqa: E402

import syncguard  # noqa: E402
from bench import _write, emit  # noqa: E402
from bench import bench_overhead as bo  # noqa: E402
from bench.design import round_order, whole_cycles  # noqa: E402
from bench.workloads import dataloader_steps, train_step  # noqa: E402
from overhead_ci import bootstrap  # noqa: E402
from tests.gpu import profiler_scenarios as ps  # noqa: E402

TARGET_RATIO = 1.03  # issue 44: every ratio at or under it (the share column says how sure)


def empty_region_us(samples: int = 51, per: int = 100) -> dict:
    """Median µs of one empty ``syncguard.audit()``'s entry and exit, over ``samples`` samples
    of ``per`` regions each; and the detectors such a region ran."""
    with syncguard.audit() as rep:
        pass
    for _ in range(2 * per):  # warm-up: caches, the first subscription
        with syncguard.audit():
            pass
    got = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(per):
            with syncguard.audit():
                pass
        got.append((time.perf_counter() - t0) / per * 1e6)
    return {"median_us": round(statistics.median(got), 3), "samples_us": [round(x, 3) for x in got],
            "detectors": list(rep.detectors), "detector_reason": rep.detector_reason}


@contextlib.contextmanager
def audited():
    """One region with the default detectors, as a user writes it."""
    with syncguard.audit():
        yield


def workloads() -> dict:
    """name -> (bare run, audited run): each a function of no argument timed whole."""
    st = bo.loop_state()
    step, epoch = train_step(), dataloader_steps()
    out = {name: (lambda w=work: w(st), lambda w=work: _in_region(w, st))
           for name, work in (("tiny_kernels", bo.tiny_loop), ("merges_100", bo.merge_loop),
                              ("training_step", step))}
    out["dataloader_step_regions"] = (lambda: epoch(contextlib.nullcontext),
                                      lambda: epoch(syncguard.audit))
    return out


def _in_region(work, st) -> None:
    with audited():
        work(st)
        torch.cuda.synchronize()  # inside, as bench_overhead.timed closes its region


def timed(run) -> float:
    """Seconds of ``run()``, CUDA synchronised before and after (bench_overhead.timed's clock)."""
    return bo.timed(lambda _: run(), bo.bare, None)


def ratios(rounds: int) -> dict:
    """Each workload bare and audited in interleaved rounds; per-round ratios and their median
    with its bootstrap interval."""
    out = {}
    for name, (bare_run, audited_run) in workloads().items():
        configs = {"bare": bare_run, "audited": audited_run}
        n = whole_cycles(rounds, len(configs))
        for run in configs.values():  # warm-up of both paths
            timed(run)
            timed(run)
        times: dict = {k: [] for k in configs}
        orders = []
        for r in range(n):
            order = round_order(configs, r)
            orders.append([k for k, _ in order])
            for k, run in order:
                times[k].append(timed(run))
        per_round = [a / b for a, b in zip(times["audited"], times["bare"])]
        med, lo, hi, share = bootstrap(per_round, TARGET_RATIO)
        out[name] = {"ratio": round(med, 4), "ci95": [round(lo, 4), round(hi, 4)],
                     "share_at_or_under_target": round(share, 3), "rounds": n,
                     "bare_median_ms": round(statistics.median(times["bare"]) * 1e3, 4),
                     "audited_median_ms": round(statistics.median(times["audited"]) * 1e3, 4),
                     "rounds_ms": {k: [round(x * 1e3, 4) for x in v] for k, v in times.items()},
                     "orders": orders}
        print(f"{name}: {med:.4f}x [{lo:.4f}, {hi:.4f}]", flush=True)
    return out


def scenario_verdicts(folder: str | None, out: str) -> list[dict]:
    """The scenarios' verdicts: read from ``folder`` where the tests kept them, any missing
    one run here; without ``folder``, every scenario run here (under OUT/scenarios)."""
    if folder is None:
        return ps.run_all(os.path.join(out, "scenarios"))
    verdicts = []
    for where, thread in ps.SCENARIOS:
        path = os.path.join(folder, f"{ps.name(where, thread)}-verdict.json")
        if os.path.exists(path):
            with open(path) as f:
                verdicts.append(json.load(f))
        else:
            verdicts.append(ps.scenario(where, thread, folder))
    return verdicts


def render(doc: dict, detail: dict) -> list[str]:
    lines = [f"# Detector summary · {detail['gpu']} · torch {doc['torch']} · commit "
             f"{doc['commit']}", "",
             f"Empty `syncguard.audit()` entered and left: **{doc['region_enter_exit_us']} µs** "
             f"(median of {len(detail['empty_region']['samples_us'])} samples of 100 regions; "
             f"detectors {','.join(detail['empty_region']['detectors'])}).", "",
             f"| workload | × bare, per round: median | 95% interval | share of resampled "
             f"medians ≤ {TARGET_RATIO} | rounds | bare ms | audited ms |", "|---|---|---|---|---|---|---|"]
    for name, r in detail["ratios"].items():
        lines.append(f"| {name} | {r['ratio']} | [{r['ci95'][0]}, {r['ci95'][1]}] | "
                     f"{r['share_at_or_under_target']} | {r['rounds']} | {r['bare_median_ms']} | "
                     f"{r['audited_median_ms']} |")
    p = doc["profiler"]
    lines += ["", f"Profiler scenarios: {p['scenarios']}, profiler errors {p['profiler_errors']}, "
              f"regions without the cuda detector {p['regions_without_cuda']} "
              f"({detail['profiler']['regions_without_cuda_unnamed']} of them without a reason; "
              f"{detail['profiler']['regions_handed_over']} region(s) handed CUPTI to a profiler "
              "that started inside them), "
              f"traces differing from the run without syncguard "
              f"{detail['profiler']['traces_differing']}.", "",
              "| scenario | exit codes (bare, audited) | profiler error | same trace | regions | "
              "without cuda: why |", "|---|---|---|---|---|---|"]
    for v in detail["scenarios"]:
        why = "; ".join(dict.fromkeys(v["without_cuda_reasons"])) or "-"
        lines.append(f"| {v['scenario']} | {v['returncodes']} | {v['profiler_error'] or '-'} | "
                     f"{v['same_trace']} | {v['regions']} | {why} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--scenarios-from", metavar="DIR",
                    help="the scenario verdicts tests/gpu/test_profiler_scenarios.py kept there")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    from syncguard.reporting.provenance import git_state

    verdicts = scenario_verdicts(a.scenarios_from, a.out)  # before any timing: other processes
    empty = empty_region_us()
    timings = ratios(a.rounds)
    prof = ps.summary(verdicts)
    state = git_state(ROOT) or {}
    doc = {"commit": state.get("commit") or "unknown", "torch": torch.__version__,
           "region_enter_exit_us": empty["median_us"],
           "ratios": {k: v["ratio"] for k, v in timings.items()},
           "profiler": {k: prof[k] for k in ("scenarios", "profiler_errors",
                                             "regions_without_cuda")}}
    detail = {"commit": doc["commit"], "dirty": state.get("dirty"), "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name(0), "target_ratio": TARGET_RATIO,
              "empty_region": empty, "ratios": timings, "profiler": prof, "scenarios": verdicts}
    _write(os.path.join(a.out, "detector-summary.json"), json.dumps(doc, indent=1) + "\n")
    _write(os.path.join(a.out, "detector-summary-detail.json"), json.dumps(detail, indent=1))
    emit(render(doc, detail), os.path.join(a.out, "detector-summary.md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
