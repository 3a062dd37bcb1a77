"""What installing syncguard costs a pytest run that does not use it (not a test).

    python bench/bench_startup.py [--rounds 40] [--before REV] [--out-dir reports/cpu]

pytest loads the ``syncguard`` entry point in every run of a venv where syncguard is installed.
In a temporary directory with one trivial test, this times whole
``python -m pytest -q -p no:cacheprovider`` runs (wall clock around the subprocess) in four
configurations, round after round:

* ``plugin``: this tree's syncguard installed, not enabled (no option, no marker);
* ``off``: the same with ``-p no:syncguard`` (the plugin never loads);
* ``before plugin`` / ``before off``: the same two with the package source of ``--before``
  (``git archive REV src``) first on ``PYTHONPATH``, so that the entry point ``syncguard.plugin``
  resolves to that revision's modules (only with ``--before``).

Each round runs every configuration once, in the order of a row of a Williams design
(bench/design.py), so that each runs at each position and after each other equally often. A
configuration's ratio is the median over rounds of ``plugin / off`` within the same round
(adjacent in time: slow drift of the host's load cancels), with a 95% bootstrap interval of that
median; the medians of each side are given too. Two unrecorded rounds first warm the page cache
and write the byte-code caches.

Writes ``startup.json`` and ``startup.md`` to ``--out-dir``; their first fields are the project
commit, whether the tree was dirty, the torch and python versions, and the command lines.
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.design import williams  # noqa: E402

PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
OFF = ["-p", "no:syncguard"]
TRIVIAL = "def test_trivial():\n    assert 1 + 1 == 2\n"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def export_src(rev: str, into: Path) -> Path:
    """The package source (``src/``) of ``rev``, unpacked under ``into``; returns its src dir."""
    data = subprocess.run(["git", "archive", "--format=tar", rev, "src"], cwd=ROOT,
                          capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def bootstrap_median(values: list[float], resamples: int = 10000, seed: int = 0
                     ) -> tuple[float, float, float]:
    """The median and a percentile-bootstrap 95% interval of it."""
    a = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    meds = np.median(rng.choice(a, size=(resamples, a.size), replace=True), axis=1)
    lo, hi = np.percentile(meds, [2.5, 97.5])
    return float(np.median(a)), float(lo), float(hi)


def time_run(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--before", metavar="REV", help="also time the plugin of this revision")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "reports" / "cpu")
    args = ap.parse_args(argv)

    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
                        "PYTHONPATH")}
    head, dirty = git("rev-parse", "HEAD"), bool(git("status", "--porcelain"))
    with tempfile.TemporaryDirectory(prefix="syncguard-startup-") as tmp:
        work = Path(tmp, "project")
        work.mkdir()
        (work / "pytest.ini").write_text("[pytest]\n")
        (work / "test_trivial.py").write_text(TRIVIAL)
        configs: dict[str, tuple[list[str], dict[str, str]]] = {
            "plugin": (PYTEST, env), "off": (PYTEST + OFF, env)}
        before_rev = None
        if args.before:
            before_rev = git("rev-parse", args.before)
            src = export_src(before_rev, Path(tmp, "before"))
            before_env = {**env, "PYTHONPATH": str(src)}
            configs["before plugin"] = (PYTEST, before_env)
            configs["before off"] = (PYTEST + OFF, before_env)
        names = list(configs)
        rows = williams(len(names))
        for _ in range(2):  # warm-up, not recorded
            for name in names:
                time_run(configs[name][0], work, configs[name][1])
        times: dict[str, list[float]] = {n: [] for n in names}
        orders = []
        for r in range(args.rounds):
            order = [names[i] for i in rows[r % len(rows)]]
            orders.append(order)
            for name in order:
                times[name].append(time_run(configs[name][0], work, configs[name][1]))
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(
                f"{n} {times[n][-1] * 1000:.0f} ms" for n in names), file=sys.stderr)

    def pair(on: str, off: str) -> dict:
        ratios = [a / b for a, b in zip(times[on], times[off])]
        med, lo, hi = bootstrap_median(ratios)
        return {"plugin": on, "off": off, "median_ratio": round(med, 4),
                "ci95": [round(lo, 4), round(hi, 4)],
                "median_plugin_s": round(statistics.median(times[on]), 4),
                "median_off_s": round(statistics.median(times[off]), 4)}

    comparisons = [pair("plugin", "off")]
    if before_rev:
        comparisons.append(pair("before plugin", "before off"))
    doc = {
        "commit": head, "dirty": dirty,
        "torch": md.version("torch"), "python": platform.python_version(),
        "commands": {n: ({"PYTHONPATH": "<src of before>"} if "PYTHONPATH" in e else {}) | {
            "argv": " ".join(["python", *c[1:]])} for n, (c, e) in configs.items()},
        "before": before_rev,
        "pytest": md.version("pytest"), "platform": platform.platform(),
        "rounds": args.rounds, "design": "williams", "warmup_rounds": 2,
        "comparisons": comparisons,
        "times_s": {n: [round(t, 5) for t in ts] for n, ts in times.items()},
        "round_orders": orders,
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "startup.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out_dir / "startup.md").write_text(markdown(doc))
    print(markdown(doc))
    return 0


def markdown(doc: dict) -> str:
    lines = [
        "# pytest start-up with syncguard installed but not enabled",
        "",
        "Written by `python bench/bench_startup.py" + (f" --before {doc['before'][:12]}"
                                                       if doc["before"] else "") + "`; do not edit.",
        "",
        f"- commit: `{doc['commit']}`{' (dirty tree)' if doc['dirty'] else ' (clean tree)'}",
        f"- torch {doc['torch']}, python {doc['python']}, pytest {doc['pytest']}, "
        f"{doc['platform']}",
        f"- {doc['rounds']} rounds (Williams design, {doc['warmup_rounds']} warm-up rounds "
        "first); one trivial test in a temporary directory",
        "",
        "| configuration | command |",
        "| --- | --- |",
    ]
    for name, cmd in doc["commands"].items():
        pre = "PYTHONPATH=<src of before> " if "PYTHONPATH" in cmd else ""
        lines.append(f"| {name} | `{pre}{cmd['argv']}` |")
    lines += ["", "| plugin code | median ratio plugin/off (per round) | 95% bootstrap CI "
              "| median plugin (s) | median off (s) |", "| --- | --- | --- | --- | --- |"]
    for c in doc["comparisons"]:
        label = (f"before (`{doc['before'][:12]}`)" if c["plugin"].startswith("before")
                 else f"this commit (`{doc['commit'][:12]}`)")
        lines.append(f"| {label} | {c['median_ratio']:.3f} | {c['ci95'][0]:.3f} to "
                     f"{c['ci95'][1]:.3f} | {c['median_plugin_s']:.3f} | {c['median_off_s']:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
