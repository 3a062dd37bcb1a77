"""``--syncguard-predict`` (+ ini twin) and ``audit/forbid(predict=True)``: the wiring of
syncguard.predict into regions and the plugin (issue 17).

No GPU and no fake detector: the predictor runs CUDA code on CPU stand-ins with the rules
measured on the H200 (syncguard/predict/rules.json). What a prediction says is
syncguard.predict's to prove (tests/test_predict*.py); here: predicted syncs reach the same
places measured ones do, labelled as predicted, fail a test only under an explicit fail mode,
and code the predictor cannot model is never reported clean.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import syncguard
from syncguard.records.events import SyncError

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]

pytest_plugins = ["pytester"]

# The issue-17 mutation: cases/merge.py's sync-free variant changed to read a device count with
# .item(); the unchanged variant beside it.
MERGE_TESTS = f"""
    import sys
    sys.path.insert(0, {str(ROOT)!r})
    from cases import merge

    def mutant(x, mask, mm):
        n = mask.to(x.device).sum().item()  # the mutation
        return merge.merge_index_copy_rows(x, mask, mm)

    def test_committed_variant():
        x, mask, mm = merge.representative_inputs("index_copy_rows", 64, 8)
        assert merge.merge_index_copy_rows(x, mask, mm) is x

    def test_mutated_variant():
        x, mask, mm = merge.representative_inputs("index_copy_rows", 64, 8)
        assert mutant(x, mask, mm) is x
"""


@pytest.fixture
def run(pytester):
    # a subprocess: importing cases.merge twice in one process re-registers torch libraries
    def _run(*args):
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", "--syncguard", *args,
                                             timeout=180)
    return _run


    return {t["nodeid"].split("::")[-1]: t for t in read_json(pytester.path / "r.json")["tests"]}


def test_the_issue_17_mutation_fails_under_prediction_in_fail_mode(pytester, run, report_tests):
    pytester.makepyfile(test_m=MERGE_TESTS)
    res = run("--syncguard-predict", "--syncguard-mode=fail", "--syncguard-report=r.json")
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(["FAILED test_m.py::test_mutated_variant*"])
    res.stdout.fnmatch_lines(["*predicted blocking_copy_d2h*"])  # the table labels it
    t = report_tests()
    assert t["test_committed_variant"]["audit"] == "clean"
    syncs = t["test_mutated_variant"]["syncs"]
    assert syncs and all(r["detectors"] == ["predict"] for r in syncs)
    assert all("predicted from the rules of torch" in r["note"] for r in syncs)
    doc = __import__("json").loads((pytester.path / "r.json").read_text())
    assert doc["options"]["predict"] is True and doc["options"]["mode"] == "fail"
    assert doc["provenance"]["detectors_ran"].startswith("predict: ")


@pytest.mark.parametrize("args, ini", [(["--syncguard-predict"], ""),
                                       ([], "syncguard_predict = true")])
def test_without_an_explicit_fail_mode_a_prediction_is_recorded_not_failing(pytester, run,
                                                                            args, ini,
                                                                            report_tests):
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(test_m=MERGE_TESTS + """
    import pytest

    @pytest.mark.syncguard(mode="fail")  # a marker alone cannot make a prediction fail
    def test_marked():
        x, mask, mm = merge.representative_inputs("index_copy_rows", 64, 8)
        mutant(x, mask, mm)
""")
    res = run(*args, "--syncguard-report=r.json")
    res.assert_outcomes(passed=3)
    t = report_tests()
    assert t["test_mutated_variant"]["audit"] == "syncs"
    assert t["test_marked"]["audit"] == "syncs"
    res.stdout.fnmatch_lines(["*predicted blocking_copy_d2h*"])  # the summary labels it


def test_code_the_predictor_cannot_model_is_not_predicted_never_clean(pytester, run, report_tests):
    pytester.makepyfile(test_m="""
        import torch

        def test_timing():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); b.record()
            try:
                a.elapsed_time(b)
            except RuntimeError:
                pass  # GPU timing cannot be predicted
    """)
    res = run("--syncguard-predict", "--syncguard-report=r.json")
    t = report_tests()["test_timing"]
    assert t["audit"] != "clean", t
    assert "not predicted" in (t["reason"] or ""), t


def test_library_regions_predict():
    with syncguard.audit(predict=True) as report:
        x = torch.randn(8, device="cuda")
        x.sum().item()  # predicted
    assert report.detectors == ("predict",) and report.detector_reason.startswith("predict")
    assert [(e.kind, e.detectors) for e in report.syncs] == [("blocking_copy_d2h", ("predict",))]
    assert report.syncs[0].filename == __file__
    with pytest.raises(SyncError):
        with syncguard.forbid(predict=True):
            torch.nonzero(torch.ones(4, device="cuda"))
    with syncguard.forbid(predict=True) as report:
        x = torch.ones(4, device="cuda")
        with syncguard.allow("read once", max=1):
            x.sum().item()
    assert len(report.allowed) == 1 and report.allowed[0].detectors == ("predict",)
    assert not torch.cuda.is_available()  # the stand-ins lived inside the blocks only


def test_the_matrix_labels_a_predicted_sync():
    from syncguard.reporting import matrix as mx
    from syncguard.records.events import SyncEvent
    from syncguard.reporting.sessionfile import TestEntry

    run = mx.Run("torch 2.13.0 · predicted", "r.json", "2.13.0", "cpu", None)
    ev = SyncEvent(api="cudaStreamSynchronize", kind="blocking_copy_d2h", filename="m.py",
                   lineno=3, detectors=("predict",))
    cell = mx.make_cell(TestEntry("t::a", "failed", "syncs", syncs=(ev,)), run)
    assert cell.syncs == (mx.Tally("predicted cudaStreamSynchronize at m.py:3", 1),)


def test_isolated_children_predict_too(pytester, run, report_tests):
    """Under prediction torch.cuda.is_available() is True, so --syncguard-isolate starts a child
    per test: the child must predict as well (not arm GPU detectors on a CPU)."""
    pytester.makeconftest("""
        import os
        os.environ.setdefault("SESSION_PID", str(os.getpid()))  # a child inherits the parent's
    """)
    pytester.makepyfile(test_m="""
        import os, torch

        def test_item(syncguard):
            syncguard.record("pids", [os.getpid(), int(os.environ["SESSION_PID"])])
            torch.ones(2, device="cuda").sum().item()
    """)
    res = run("--syncguard-predict", "--syncguard-isolate", "--syncguard-report=r.json")
    res.assert_outcomes(passed=1)
    t = report_tests()["test_item"]
    here, session = t["measurements"]["pids"]
    assert here != session  # ran in a child
    assert t["audit"] == "syncs", t
    assert t["syncs"][0]["detectors"] == ["predict"]
