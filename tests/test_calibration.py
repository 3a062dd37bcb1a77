"""`syncguard calibrate`: the figures of a predicted run against a GPU run, over two small
session reports written here by hand (no GPU, no prediction runs); every expected figure below
is counted by hand from those two documents (see the comment above GPU_TESTS)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from syncguard import cli

GPU_ROOT = "/ci/gpu/checkout/"
CPU_ROOT = "/home/dev/proj/"


def record(root: str, where: str, kind: str, test_file: str = "tests/test_a.py") -> dict:
    """One site record at ``where`` ("file:line"), its stack ending in the test's own file."""
    name, line = where.split(":")
    return {"kind": kind, "api": "cudaStreamSynchronize", "filename": root + name,
            "lineno": int(line), "count": 1, "phases": {"run": 1},
            "stack": [f"{root}{name}:{line} in f", f"{root}{test_file}:7 in test"]}


def entry(root: str, name: str, outcome: str, audit: str, syncs=(), allowed=()) -> dict:
    return {"nodeid": f"tests/test_a.py::{name}", "outcome": outcome, "audit": audit,
            "syncs": [record(root, *s) for s in syncs],
            "allowed": [record(root, *s) for s in allowed]}


def document(root: str, predicted: bool, tests: list) -> dict:
    env = {"torch": "2.13.0+cpu" if predicted else "2.11.0+cu130", "device": "cuda",
           "gpu": "predicted CUDA device (syncguard)" if predicted else "NVIDIA H200"}
    ran = ("predict: syncs predicted on the CPU" if predicted
           else "cuda: CUPTI callbacks on the CUDA runtime and driver")
    return {"schema_version": 4, "kind": "syncguard-session", "complete": True,
            "environment": env, "provenance": {"detectors_ran": ran},
            "options": {"mode": "record", "predict": predicted},
            "tests": [entry(root, *t) for t in tests]}


# GPU sites: a.py:10 d2h, a.py:20 h2d, b.py:5 stream_sync (allowed), a.py:30 device_sync (4).
# Predicted sites: a.py:10 d2h (right), a.py:20 d2h (wrong kind), b.py:5 stream_sync (right),
# c.py:1 device_sync (never measured) (4). So 2 of 4 GPU sites right (recall 0.5); 2 of 4
# predicted sites never measured (0.5); lines a.py:10, a.py:20, b.py:5 predicted, 2 of those 3
# GPU sites with the right kind (0.6667). Verdicts over t1, t2, t3, t5 (audited in both; t4 is
# not predicted): t3 is predicted to sync but measured clean, 3 of 4 agree (0.75). t4 is 1 of
# the 5 tests audited on the GPU not predicted (0.2). t2 failed when predicted, passed on the
# GPU (1). t6 is only in the GPU report, t7 only in the predicted one: neither counts.
GPU_TESTS = [
    ("t1", "passed", "syncs", [("src/a.py:10", "blocking_copy_d2h")]),
    ("t2", "passed", "syncs", [("src/a.py:20", "blocking_copy_h2d")],
     [("src/b.py:5", "stream_sync")]),
    ("t3", "passed", "clean"),
    ("t4", "passed", "syncs", [("src/a.py:30", "device_sync")]),
    ("t5", "passed", "clean"),
    ("t6", "passed", "syncs", [("src/z.py:1", "device_sync")]),
]
PREDICTED_TESTS = [
    ("t1", "passed", "syncs", [("src/a.py:10", "blocking_copy_d2h")]),
    ("t2", "failed", "syncs", [("src/a.py:20", "blocking_copy_d2h")],
     [("src/b.py:5", "stream_sync")]),
    ("t3", "passed", "syncs", [("src/c.py:1", "device_sync")]),
    ("t4", "passed", "not_audited"),
    ("t5", "passed", "clean"),
    ("t7", "passed", "syncs", [("src/y.py:1", "device_sync")]),
]


@pytest.fixture
def pair(tmp_path) -> tuple[Path, Path]:
    gpu = tmp_path / "gpu.json"
    pred = tmp_path / "predicted.json"
    gpu.write_text(json.dumps(document(GPU_ROOT, False, GPU_TESTS)))
    pred.write_text(json.dumps(document(CPU_ROOT, True, PREDICTED_TESTS)))
    return gpu, pred


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_figures_counted_by_hand(pair, tmp_path, capsys):
    gpu, pred = pair
    out = tmp_path / "cal.json"
    md = tmp_path / "cal.md"
    assert cli.main(["calibrate", str(gpu), str(pred), "--json", str(out), "--markdown", str(md),
                     "--suite", "hand"]) == 0
    doc = json.loads(out.read_text())
    assert {k: doc[k] for k in ("suite", "site_recall", "site_false_positive_share",
                                "kind_agreement", "test_verdict_agreement",
                                "not_predicted_share", "failures_caused_by_prediction")} == {
        "suite": "hand", "site_recall": 0.5, "site_false_positive_share": 0.5,
        "kind_agreement": 0.6667, "test_verdict_agreement": 0.75, "not_predicted_share": 0.2,
        "failures_caused_by_prediction": 1}
    assert doc["tests"]["failed_by_prediction"] == ["tests/test_a.py::t2"]
    assert doc["tests"]["not_predicted"] == ["tests/test_a.py::t4"]
    assert doc["tests"]["predicted_sync_measured_clean"] == ["tests/test_a.py::t3"]
    assert doc["tests"]["measured_sync_predicted_clean"] == []
    assert doc["counts"]["tests_compared"] == 5
    # the two checkouts' roots are gone from the site names, so the same file compares
    assert {"site": "src/a.py:10", "kind": "blocking_copy_d2h", "gpu_tests": 1,
            "predicted_tests": 1} in doc["sites"]
    text = capsys.readouterr().out
    assert "site_recall: 0.5 (2 of 4 GPU sites predicted with the right kind)" in text
    assert "failures_caused_by_prediction: 1" in text
    markdown = md.read_text()
    assert "| `src/a.py:30` | device_sync | 1 | 0 |" in markdown
    assert "| `src/c.py:1` | device_sync | 0 | 1 |" in markdown


def test_identical_runs_agree_fully(tmp_path, capsys):
    """A predicted run that says exactly what the GPU measured: every share is 1, none failed."""
    same = [t for t in GPU_TESTS]
    gpu, pred = tmp_path / "g.json", tmp_path / "p.json"
    gpu.write_text(json.dumps(document(GPU_ROOT, False, same)))
    pred.write_text(json.dumps(document(CPU_ROOT, True, same)))
    out = tmp_path / "o.json"
    assert cli.main(["calibrate", str(gpu), str(pred), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [doc[k] for k in ("site_recall", "site_false_positive_share", "kind_agreement",
                             "test_verdict_agreement", "not_predicted_share",
                             "failures_caused_by_prediction")] == [1.0, 0.0, 1.0, 1.0, 0.0, 0]


def test_missing_file_is_one_line(pair, capsys, tmp_path):
    gpu, _ = pair
    assert cli.main(["calibrate", str(gpu), str(tmp_path / "nope.json")]) == 2
    assert "nope.json: session report not found" in error_line(capsys)


def test_not_a_session_report_is_one_line(pair, capsys, tmp_path):
    gpu, _ = pair
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema_version": 4, "kind": "syncguard-corpus-run"}))
    assert cli.main(["calibrate", str(gpu), str(other)]) == 2
    assert "other.json" in error_line(capsys)


def test_gpu_report_given_as_predicted_is_refused(pair, capsys, tmp_path):
    gpu, _ = pair
    out = tmp_path / "o.json"
    assert cli.main(["calibrate", str(gpu), str(gpu), "--json", str(out)]) == 2
    assert "was not predicted" in error_line(capsys)
    assert not out.exists()


def test_predicted_report_given_as_gpu_is_refused(pair, capsys):
    gpu, pred = pair
    assert cli.main(["calibrate", str(pred), str(gpu)]) == 2
    assert "was predicted, not measured on a GPU" in error_line(capsys)


def test_reports_of_other_suites_are_refused(tmp_path, capsys):
    gpu, pred = tmp_path / "g.json", tmp_path / "p.json"
    gpu.write_text(json.dumps(document(GPU_ROOT, False, GPU_TESTS[:2])))
    pred.write_text(json.dumps(document(CPU_ROOT, True, PREDICTED_TESTS[5:])))
    assert cli.main(["calibrate", str(gpu), str(pred)]) == 2
    assert "no test is in both reports" in error_line(capsys)


def test_output_over_an_input_is_refused(pair, capsys):
    gpu, pred = pair
    before = pred.read_text()
    assert cli.main(["calibrate", str(gpu), str(pred), "--json", str(pred)]) == 2
    assert "is one of the input reports" in error_line(capsys)
    assert pred.read_text() == before
