"""Prediction calibrated on a real suite: kornia's own tests, predicted on a CPU, against the
committed H200 run of the same tests.

    python tools/kornia_calibration.py KORNIA_DIR [--venv DIR] [--workers N] [--out DIR]

KORNIA_DIR is a git checkout of kornia (the GPU run is of commit ``b4f5a78``; another commit is
run too and recorded as such). Nothing is fetched from the network: the venv (``--venv``,
default KORNIA_DIR/.venv-syncguard, made if missing) gets torch 2.13.0 (CPU), kornia's test
dependencies as the GPU run had them, and this syncguard checkout (editable), from the
machine's package index. Then, in KORNIA_DIR, the issue's command (#45):

    pytest --syncguard --syncguard-report=... tests/color tests/enhance tests/filters
        tests/morphology tests/metrics --device cuda -n 2

with ``--syncguard-predict`` added when the installed plugin does not predict by default on a
machine without CUDA (``auto`` in its help). Then ``syncguard calibrate`` against the GPU truth,
``reports/real-suite/kornia/real-suite/syncguard-1.json.gz``, writes OUT/kornia.json (the
issue's shape plus the commits and the command) and OUT/kornia.md; the predicted report itself
is kept gzipped beside them (OUT/kornia-predicted.json.gz).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPU_REPORT = "reports/real-suite/kornia/real-suite/syncguard-1.json.gz"
GPU_COMMIT = "b4f5a78a13891c7ac4c1cd9695941380273e981d"
TEST_DIRS = ["tests/color", "tests/enhance", "tests/filters", "tests/morphology", "tests/metrics"]
#: kornia's runtime and test dependencies, as the GPU run had them (reports/real-suite/kornia/)
DEPS = ["torch==2.13.0", "kornia_rs==0.2.0", "numpy", "packaging", "pillow", "pytest",
        "pytest-timeout", "pytest-xdist"]
FIGURES = ("site_recall", "site_false_positive_share", "kind_agreement",
           "test_verdict_agreement", "not_predicted_share", "failures_caused_by_prediction")


def _commit(path: Path) -> str:
    out = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True,
                         text=True)
    if out.returncode:
        raise SystemExit(f"kornia_calibration: {path} is not a git checkout of kornia")
    return out.stdout.strip()


def venv_python(venv: Path) -> Path:
    """The venv's interpreter, the venv made and filled first where it is missing."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *DEPS, "-e", f"{ROOT}[dev]"],
                       check=True)
    return python


def predicts_by_default(python: Path, cwd: Path) -> bool:
    """Whether bare ``--syncguard`` predicts on this machine: the plugin's help offers ``auto``
    for ``--syncguard-predict`` (issue #45's "predict by default")."""
    text = subprocess.run([str(python), "-m", "pytest", "--help", "-p", "no:cacheprovider"],
                          cwd=cwd, capture_output=True, text=True).stdout
    return re.search(r"--syncguard-predict=\S*auto", text) is not None


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("kornia", type=Path, help="a git checkout of kornia")
    ap.add_argument("--venv", type=Path, help="venv to use or make "
                                              "(default: KORNIA/.venv-syncguard)")
    ap.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (default 2)")
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "predict",
                    help="folder for kornia.json, kornia.md and the predicted report "
                         "(default reports/predict)")
    args = ap.parse_args(argv)
    kornia = args.kornia.resolve()
    commit = _commit(kornia)
    if commit != GPU_COMMIT:
        print(f"kornia_calibration: kornia is at {commit}, the GPU run at {GPU_COMMIT}; "
              "running anyway, recorded in the result", file=sys.stderr)
    python = venv_python((args.venv or kornia / ".venv-syncguard").resolve())
    predict_flag = [] if predicts_by_default(python, kornia) else ["--syncguard-predict"]
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        predicted = Path(tmp) / "kornia-predicted.json"
        cmd = ["-m", "pytest", "-p", "no:cacheprovider", "-q", "--syncguard", *predict_flag,
               f"--syncguard-report={predicted}", *TEST_DIRS, "--device", "cuda",
               "-n", str(args.workers)]
        t0 = time.monotonic()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("CUDA_VISIBLE_DEVICES", None)
        ran = subprocess.run([str(python), *cmd], cwd=kornia, env=env, capture_output=True,
                             text=True)
        wall = round(time.monotonic() - t0, 1)
        tail = (ran.stdout + ran.stderr).strip().splitlines()[-1:] or ["?"]
        print(f"pytest exit {ran.returncode} after {wall} s: {tail[0]}")
        if not predicted.exists():
            sys.stderr.write(ran.stdout[-3000:] + ran.stderr[-3000:])
            return 1
        full = Path(tmp) / "calibration.json"
        md = args.out / "kornia.md"
        calib = subprocess.run([str(python), "-m", "syncguard", "calibrate",
                                str(ROOT / GPU_REPORT), str(predicted), "--json", str(full),
                                "--markdown", str(md), "--suite", f"kornia {commit[:7]}"],
                               capture_output=True, text=True)
        sys.stdout.write(calib.stdout)
        if calib.returncode:
            sys.stderr.write(calib.stderr)
            return calib.returncode
        detail = json.loads(full.read_text())
        with gzip.GzipFile(args.out / "kornia-predicted.json.gz", "wb", mtime=0) as f:
            f.write(predicted.read_bytes())
    result = {"suite": f"kornia {commit[:7]}", "gpu_report": GPU_REPORT,
              **{k: detail[k] for k in FIGURES},
              "commit": os.environ.get("SYNCGUARD_GIT_COMMIT") or _commit(ROOT),
              "kornia_commit": commit, "predicted_report": "reports/predict/"
              "kornia-predicted.json.gz",
              "command": "pytest " + " ".join(cmd[2:]).replace(str(predicted),
                                                                "kornia-predicted.json"),
              "pytest_exit": ran.returncode, "wall_s": wall, "counts": detail["counts"]}
    (args.out / "kornia.json").write_text(json.dumps(result, indent=1) + "\n")
    header = (f"# kornia {commit[:7]}: predicted on a CPU (torch 2.13.0) against the H200 run\n\n"
              f"`python tools/kornia_calibration.py KORNIA_DIR` at syncguard {result['commit']}; "
              f"command: `{result['command']}` (exit {ran.returncode}, {wall} s, "
              f"{args.workers} workers); truth: `{GPU_REPORT}`. Figures: `kornia.json`.\n\n")
    md.write_text(header + md.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
