"""``--syncguard-predict`` takes effect before the first conftest is imported.

Many suites read ``torch.cuda.is_available()`` while pytest imports their root conftest (a
module global, a skip condition built at import). Those reads happen before any
``pytest_configure``; prediction must already answer them, or every CUDA test skips and the
run reads clean. Also here: a run that predicted nothing says so in the summary's first line
and fails under ``--syncguard-require-cuda``, and tests the predictor could not see are labelled
"not predicted", not "no CUDA".

No GPU and no fake detector: the predictor runs CUDA code on CPU stand-ins (CPU torch). The
expected outcomes are what a real GPU machine would give these tiny suites (the CUDA test runs
and its ``.item()`` is a device-to-host copy), written down by hand.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytest_plugins = ["pytester"]

def _restored() -> str:
    """What the conftest writes at unconfigure once torch.cuda is the real one again."""
    return f"{torch.cuda.is_available()} False"


@pytest.fixture
def suite(cuda_suite):
    """conftest.py's tiny suite: a conftest reading CUDA at import, and a CUDA test."""
    return cuda_suite


def test_a_conftest_reading_cuda_at_import_sees_prediction(suite, syncguard_section,
                                                           report_tests):
    res = suite.runpytest_subprocess("-p", "no:cacheprovider", "--syncguard",
                                     "--syncguard-predict", "--syncguard-report=r.json",
                                     timeout=180)
    res.assert_outcomes(passed=1)
    t = report_tests()["test_cuda"]
    assert t["audit"] == "syncs", t
    assert [s["kind"] for s in t["syncs"]] == ["blocking_copy_d2h"]
    assert not syncguard_section(res)[0].startswith("NOTHING PREDICTED"), res.outlines
    assert (suite.path / "restored-main").read_text() == _restored()


def test_without_predict_the_conftest_sees_no_cuda_and_the_test_skips(suite):
    res = suite.runpytest_subprocess("-p", "no:cacheprovider", "--syncguard",
                                     "--syncguard-predict=off", timeout=180)
    res.assert_outcomes(skipped=1)
    assert (suite.path / "restored-main").read_text() == _restored()


def test_predict_without_syncguard_opens_nothing_early(suite):
    """Prediction needs ``--syncguard`` as well (the session predicts only then): alone, the
    flag leaves conftests to the real torch.cuda."""
    res = suite.runpytest_subprocess("-p", "no:cacheprovider", "--syncguard-predict",
                                     timeout=180)
    res.assert_outcomes(skipped=1)


def test_the_ini_twin_predicts_early_too(suite):
    suite.makeini("[pytest]\nsyncguard = true\nsyncguard_predict = true\n")
    res = suite.runpytest_subprocess("-p", "no:cacheprovider", timeout=180)
    res.assert_outcomes(passed=1)


def test_torch_cuda_is_restored_after_an_in_process_run(suite):
    original = torch.cuda.is_available
    res = suite.inline_run("-p", "no:cacheprovider", "--syncguard", "--syncguard-predict")
    res.assertoutcome(passed=1)
    assert torch.cuda.is_available is original


def test_torch_cuda_is_restored_when_a_conftest_fails_to_import(pytester):
    pytester.makeconftest("import torch\nassert not torch.cuda.is_available(), 'stand-in'\n")
    pytester.makepyfile(test_k="def test_x():\n    pass\n")
    original = torch.cuda.is_available
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--syncguard",
                                       "--syncguard-predict")
    assert res.ret != 0
    assert torch.cuda.is_available is original


def test_xdist_workers_predict_early(suite, report_tests):
    pytest.importorskip("xdist")
    res = suite.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--syncguard",
                                     "--syncguard-predict", "--syncguard-report=r.json",
                                     timeout=180)
    res.assert_outcomes(passed=1)
    assert report_tests()["test_cuda"]["audit"] == "syncs"
    # the controller puts torch.cuda back; a worker may be ended by the controller before its
    # unconfigure writes (xdist tears its gateways down), so a worker's file is checked when
    # it was written
    assert (suite.path / "restored-main").read_text() == _restored()
    for path in suite.path.glob("restored-gw*"):
        assert path.read_text() == _restored(), path.name


PLAIN_TEST = """
    def test_plain():
        assert 1 + 1 == 2
"""


def test_nothing_predicted_is_the_first_line(pytester, syncguard_section):
    pytester.makepyfile(test_p=PLAIN_TEST)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--syncguard",
                                        "--syncguard-predict", timeout=180)
    assert res.ret == 0
    assert syncguard_section(res)[0].startswith("NOTHING PREDICTED: "), res.outlines
    assert "1 test(s) ran under prediction" in syncguard_section(res)[0]


def test_nothing_predicted_fails_under_require_cuda(pytester):
    pytester.makepyfile(test_p=PLAIN_TEST)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--syncguard",
                                        "--syncguard-predict", "--syncguard-require-cuda",
                                        timeout=180)
    res.assert_outcomes(passed=1)
    assert res.ret == 1
    assert "--syncguard-require-cuda: nothing was predicted" in res.stdout.str()


def test_a_predicted_suite_passes_require_cuda(suite):
    res = suite.runpytest_subprocess("-p", "no:cacheprovider", "--syncguard",
                                     "--syncguard-predict", "--syncguard-require-cuda",
                                     timeout=180)
    res.assert_outcomes(passed=1)
    assert res.ret == 0, res.outlines


def test_a_test_that_skips_in_its_body_reads_nothing_predicted(pytester, syncguard_section):
    """A skip inside the test (kornia's way: the skip reads a global set at conftest import)
    ran its call phase under prediction, and predicted nothing."""
    pytester.makepyfile(test_s="""
        import pytest

        def test_cuda():
            pytest.skip("Device 'cuda' is not available")
    """)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--syncguard",
                                        "--syncguard-predict", "--syncguard-require-cuda",
                                        timeout=180)
    res.assert_outcomes(skipped=1)
    assert res.ret == 1
    first = syncguard_section(res)[1]  # after the gate's FAILED line
    assert first.startswith("NOTHING PREDICTED: "), res.outlines
    assert "1 skipped" in first


def test_skipped_cuda_tests_read_nothing_predicted(pytester, syncguard_section):
    """A CUDA test skipped by a marker never runs under prediction: nothing predicted."""
    pytester.makepyfile(test_s="""
        import pytest

        @pytest.mark.skip(reason="Device 'cuda' is not available")
        def test_cuda():
            pass
    """)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--syncguard",
                                        "--syncguard-predict", "--syncguard-require-cuda",
                                        timeout=180)
    assert res.ret == 1
    first = syncguard_section(res)[1]  # after the gate's FAILED line
    assert first.startswith("NOTHING PREDICTED: "), res.outlines
    assert "1 off/not run, 1 skipped" in first


def test_calls_not_predicted_are_labelled_so_not_no_cuda(pytester, syncguard_section):
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
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--syncguard",
                                        "--syncguard-predict", timeout=180)
    text = "\n".join(syncguard_section(res))
    assert "no CUDA" not in text, text
    assert "1 not predicted" in text
    assert "not predicted because: 1 call(s) not predicted" in text
    # a call it could not predict is something the predictor saw: not "nothing predicted"
    assert not text.startswith("NOTHING PREDICTED")
