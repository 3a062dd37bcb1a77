"""``--syncguard-predict=on|off|auto``: on a machine without CUDA ``pytest --syncguard``
predicts by default (issue 45, part 2), labelled "predicted" in the terminal summary.

This machine has no CUDA, so the plugin under ``auto`` here is the plugin on any CPU runner:
no fake detector, the predictor runs CUDA code on CPU stand-ins (the expected outcomes are
what a GPU would give these tiny suites, written by hand: the CUDA test runs and its ``.item()``
is a device-to-host copy). What ``auto`` does on a GPU machine is tested here by replacing the
availability probe (``early.cuda_devices``) in an in-process run: it proves the decision's
plumbing, not CUDA's answer.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytest_plugins = ["pytester"]

PLAIN_TEST = """
    def test_plain():
        pass
"""


def test_syncguard_alone_predicts_and_records(cuda_suite, syncguard_section, report_tests):
    res = cuda_suite.runpytest_subprocess("-p", "no:cacheprovider", "--syncguard",
                                          "--syncguard-report=r.json", timeout=180)
    res.assert_outcomes(passed=1)  # a predicted sync is recorded: the test does not fail
    t = report_tests()["test_cuda"]
    assert (t["audit"], [s["kind"] for s in t["syncs"]]) == ("syncs", ["blocking_copy_d2h"])
    assert t["syncs"][0]["detectors"] == ["predict"]
    first, counts = syncguard_section(res)[:2]
    assert first.startswith("PREDICTED, not measured: CUDA code ran on CPU stand-ins for torch "
                            f"{torch.__version__} with the rules measured on a GPU on torch "), first
    assert first.endswith("(auto: this machine has no CUDA)"), first
    assert counts == "1 test(s) predicted: 0 clean, 1 with syncs, 0 allowed only; 0 not predicted"


def test_fail_mode_asked_for_fails_a_predicted_sync(cuda_suite):
    res = cuda_suite.runpytest_subprocess("-p", "no:cacheprovider", "--syncguard",
                                          "--syncguard-mode=fail", timeout=180)
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*predicted blocking_copy_d2h*"])


@pytest.mark.parametrize("args, ini, predicts", [
    (["--syncguard-predict"], "", True),  # bare: on, as before the option took a word
    (["--syncguard-predict=on"], "", True),
    (["--syncguard-predict=auto"], "", True),
    ([], "syncguard_predict = true", True),  # the ini twin's old boolean spelling
    ([], "syncguard_predict = on", True),
    (["--syncguard-predict=off"], "", False),
    ([], "syncguard_predict = off", False),
    ([], "syncguard_predict = false", False),
    (["--syncguard-predict=off"], "syncguard_predict = on", False),  # the command line wins
])
def test_each_word(cuda_suite, syncguard_section, args, ini, predicts):
    cuda_suite.makeini(f"[pytest]\n{ini}\n")
    # in-process (torch._dynamo, which prediction's first call imports, is imported before any
    # test by tests/conftest.py, so an inner run no longer drops it)
    res = cuda_suite.runpytest_inprocess("-p", "no:cacheprovider", "--syncguard", *args)
    if predicts:
        res.assert_outcomes(passed=1)
        assert syncguard_section(res)[0].startswith("PREDICTED, not measured: ")
    else:  # the conftest saw the real torch.cuda of this CPU machine
        res.assert_outcomes(skipped=1)


def test_off_says_why_nothing_was_predicted(pytester, syncguard_section):
    pytester.makepyfile(test_p=PLAIN_TEST)
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--syncguard",
                                       "--syncguard-predict=off")
    assert syncguard_section(res)[0] == ("NO TEST WAS AUDITED: 1 not audited (no CUDA; not "
                                         "predicted: --syncguard-predict=off)")


@pytest.mark.parametrize("args, ini, where", [
    (["--syncguard-predict=maybe"], "", "command line option --syncguard-predict: 'maybe'"),
    # a bare flag takes the next word: a path there is refused, saying how to write it
    (["--syncguard-predict", "test_p.py"], "",
     "command line option --syncguard-predict: 'test_p.py'"),
    ([], "syncguard_predict = maybe", "ini option syncguard_predict ("),
])
def test_a_bad_value_is_a_one_line_usage_error_naming_its_source(pytester, args, ini, where):
    pytester.makepyfile(test_p=PLAIN_TEST)
    pytester.makeini(f"[pytest]\n{ini}\n")
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--syncguard", *args)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [x for x in res.errlines if "syncguard" in x]
    assert line.startswith(f"ERROR: syncguard: {where}"), line
    assert "is not one of on, off, auto" in line and "--syncguard-predict=on" in line


def test_named_detectors_measure_under_auto(pytester, syncguard_section):
    """Naming detectors asks for them: auto predicts only under the default detectors (the
    fake detector of syncguard.testing works without CUDA, and tests their plumbing)."""
    pytester.makepyfile(test_p="""
        from syncguard.testing import fake_sync  # FAKE detector: plumbing only

        def test_sync():
            fake_sync(op="aten::nonzero")
    """)
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--syncguard",
                                       "--syncguard-detectors=fake", "--syncguard-mode=record")
    assert syncguard_section(res)[0].startswith("1 test(s) audited: 0 clean, 1 with syncs")
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--syncguard",
                                       "--syncguard-detectors=debug")
    assert syncguard_section(res)[0] == (
        "NO TEST WAS AUDITED: 1 not audited (no CUDA; not predicted: auto: detectors were "
        "named, so they measure (--syncguard-predict=on predicts))")


def test_auto_on_a_gpu_machine_measures(cuda_suite, syncguard_section, monkeypatch):
    """The probe replaced to say "one device" (what a GPU machine answers): auto opens no
    prediction, the conftest sees the real torch.cuda (False on this CPU machine, so the CUDA
    test skips) and tests are judged by the real detectors (not audited here: no CUDA)."""
    from syncguard.pytest_plugin import early

    monkeypatch.setattr(early, "cuda_devices", lambda: 1)
    cuda_suite.makepyfile(test_p=PLAIN_TEST)
    res = cuda_suite.runpytest_inprocess("-p", "no:cacheprovider", "--syncguard")
    res.assert_outcomes(passed=1, skipped=1)
    assert syncguard_section(res)[0] == (
        "NO TEST WAS AUDITED: 2 not audited (no CUDA; not predicted: auto: this machine has "
        "CUDA (1 device(s)), so it measures)")  # the skip inside the test: its call phase ran


def test_xdist_workers_decide_auto_alike(cuda_suite, report_tests):
    pytest.importorskip("xdist")
    res = cuda_suite.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--syncguard",
                                          "--syncguard-report=r.json", timeout=180)
    res.assert_outcomes(passed=1)
    assert report_tests()["test_cuda"]["audit"] == "syncs"


def test_an_isolated_child_is_told_the_decision():
    """The child never decides again (auto would ask its own machine): on or off, as decided."""
    from syncguard.pytest_plugin.options import Settings, command_line

    assert "--syncguard-predict=on" in command_line(Settings(enabled=True, predict=True))
    assert "--syncguard-predict=off" in command_line(Settings(enabled=True, predict=False))
