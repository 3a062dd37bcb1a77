"""docs/ci.md's recipe holds: the example workflow passes the GitHub workflow schema (bundled by
check-jsonschema, offline) and a broken one fails it; every syncguard option the doc and the
workflow name is one pytest or `syncguard report` offers; the nox sessions they name exist and
the workflow's matrix step lists them; the audit session's report path follows its inputs."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "docs" / "examples" / "syncguard-ci.yml"
DOC = ROOT / "docs" / "ci.md"
TEXTS = [WORKFLOW.read_text(encoding="utf-8"), DOC.read_text(encoding="utf-8")]

needs_checker = pytest.mark.skipif(shutil.which("check-jsonschema") is None,
                                   reason="check-jsonschema is not installed")


def _check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["check-jsonschema", "--builtin-schema", "vendor.github-workflows",
                           str(path)], capture_output=True, text=True, timeout=120)


@needs_checker
def test_the_example_workflow_passes_the_github_schema():
    done = _check(WORKFLOW)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_checker
def test_a_job_without_runs_on_is_rejected(tmp_path):
    broken = tmp_path / "broken.yml"
    text = WORKFLOW.read_text(encoding="utf-8")
    without = re.sub(r"(?m)^    runs-on: ubuntu-latest\n", "", text, count=1)
    assert without != text
    broken.write_text(without, encoding="utf-8")
    done = _check(broken)
    assert done.returncode == 1
    assert "runs-on" in done.stdout + done.stderr


def _offered(args: list[str]) -> set[str]:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return set(re.findall(r"--[a-z][a-z-]+", done.stdout))


def test_every_option_named_is_offered():
    pytest_opts = {o for o in _offered(["-m", "pytest", "--help", "-p", "no:cacheprovider"])
                   if o.startswith("--syncguard")}
    report_opts = _offered(["-m", "syncguard", "report", "--help"])
    named = {o for t in TEXTS for o in re.findall(r"--syncguard[a-z-]*", t)}
    assert named and named <= pytest_opts, named - pytest_opts
    for text in TEXTS:
        for line in re.findall(r"syncguard report [^\n]*", text):
            opts = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", line))
            assert opts <= report_opts, (line, opts - report_opts)


def _noxfile():
    spec = importlib.util.spec_from_file_location("noxfile_under_test", ROOT / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


nox_missing = pytest.mark.skipif(shutil.which("nox") is None, reason="nox is not installed")


@nox_missing
def test_the_sessions_named_exist_and_the_matrix_step_lists_the_torch_versions(tmp_path):
    versions = ["2.8.0", "2.11.0", "2.13.0", "2.14.1"]  # noxfile.py's list, written out here
    listed = subprocess.run(["nox", "--list"], capture_output=True, text=True, cwd=ROOT,
                            timeout=120).stdout
    for text in TEXTS:
        for name in re.findall(r'nox -s "([^"$]+)"', text):
            assert f" {name}" in listed, name
    yaml = pytest.importorskip("ruamel.yaml")
    jobs = yaml.YAML(typ="safe").load(WORKFLOW.read_text(encoding="utf-8"))["jobs"]
    (step,) = [s for s in jobs["torch-versions"]["steps"] if s.get("id") == "list"]
    out = tmp_path / "github_output"
    subprocess.run(["bash", "-e", "-c", step["run"]], cwd=ROOT, check=True, timeout=120,
                   env={**os.environ, "GITHUB_OUTPUT": str(out)})
    assert out.read_text() == 'torch=["' + '", "'.join(versions) + '"]\n'
    assert "audit(${{ matrix.torch }})" in jobs["predict"]["steps"][-2]["run"]


def test_the_audit_report_path():
    report_path = _noxfile().report_path
    assert report_path("cuda", "2.11.0", [], {}) == "reports/cuda-torch-2.11.0.json"
    # a CPU machine predicts by default (--syncguard-predict=auto), unless told off or given
    # detectors to run; a GPU machine measures unless told on
    for args, kind in [(["-x"], "predict"), (["--syncguard-predict"], "predict"),
                       (["--syncguard-predict=off"], "cpu"),
                       (["--syncguard-predict=on", "--syncguard-predict=off"], "cpu"),
                       (["--syncguard-detectors=debug"], "cpu")]:
        assert report_path("cpu", "2.13.0", args, {"SYNCGUARD_REPORT_DIR": "out/"}) == \
            f"out/{kind}-torch-2.13.0.json", args
    assert report_path("cuda", "2.11.0", ["--syncguard-predict=on"], {}) == \
        "reports/predict-torch-2.11.0.json"


def test_the_upload_and_gate_folders_agree():
    jobs_text = TEXTS[0]
    assert "SYNCGUARD_REPORT_DIR: syncguard-reports" in jobs_text
    assert jobs_text.count("path: syncguard-reports/") == 2
    assert 'syncguard report "syncguard-reports/*.json"' in jobs_text
