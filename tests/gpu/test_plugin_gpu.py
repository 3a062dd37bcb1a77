"""The plugin's CUDA-only paths on a real GPU (skipped without CUDA): --syncguard-isolate starts a
subprocess per audited test, --syncguard-require-cuda passes once a test is really audited, and
the README's fixture example behaves as documented with real syncs.

Each inner run's output and session report are copied to ``$SYNCGUARD_GPU_OUT/<test name>/``
when that variable is set, so a GPU run leaves evidence files.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def run(pytester, monkeypatch, request):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))

    def _run(*args):
        res = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=300)
        out = os.environ.get("SYNCGUARD_GPU_OUT")
        if out:
            folder = Path(out, request.node.name)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "stdout.txt").write_text(res.stdout.str() + "\n" + res.stderr.str())
            if (pytester.path / "r.json").exists():
                shutil.copy(pytester.path / "r.json", folder / "r.json")
        return res
    return _run


def _tests(pytester) -> dict:
    doc = json.loads((pytester.path / "r.json").read_text())
    return {t["nodeid"].split("::")[-1]: t for t in doc["tests"]}


def test_isolate_with_cuda_runs_each_audited_test_in_a_subprocess(pytester, run):
    """The inner pytest is a child of this process; an isolated test is a grandchild, so its
    parent is not this process."""
    pytester.makepyfile(test_m="""
        import os, torch

        def test_a(syncguard):
            syncguard.record("ppid", os.getppid())
            (torch.randn(64, device="cuda") * 2).sum()
    """)
    res = run("--syncguard", "--syncguard-isolate", "--syncguard-report=r.json")
    res.assert_outcomes(passed=1)
    t = _tests(pytester)["test_a"]
    assert t["audit"] == "clean"  # audited for real, on CUDA
    assert t["measurements"]["ppid"] != os.getpid()
    assert "--syncguard-isolate: no subprocesses" not in res.stdout.str()


def test_require_cuda_passes_when_a_test_is_audited(pytester, run):
    pytester.makepyfile(test_m="""
        import torch

        def test_clean():
            (torch.randn(64, device="cuda") * 2).sum()
    """)
    res = run("--syncguard", "--syncguard-require-cuda", "--syncguard-report=r.json")
    assert res.ret == 0
    res.stdout.fnmatch_lines(["1 test(s) audited: 1 clean*"])


README_EXAMPLE = """
    import torch

    def setup_that_may_sync():
        return torch.randn(256, device="cuda").sum().item()

    def step(x, sync=False):
        y = x * 2
        return y.sum().item() if sync else y

    def test_part(syncguard):
        setup_that_may_sync()
        x = torch.randn(256, device="cuda")
        with syncguard.forbid():
            step(x)

    def test_part_syncs(syncguard):
        x = torch.randn(256, device="cuda")
        with syncguard.forbid():
            step(x, sync=True)

    def test_whole():
        setup_that_may_sync()
"""


def test_readme_fixture_example_on_the_gpu(pytester, run):
    pytester.makepyfile(test_m=README_EXAMPLE)
    res = run("--syncguard", "--syncguard-report=r.json")
    res.assert_outcomes(passed=1, failed=2)
    t = _tests(pytester)
    assert (t["test_part"]["outcome"], t["test_part"]["audit"]) == ("passed", "clean")
    assert t["test_part_syncs"]["outcome"] == "failed" and t["test_part_syncs"]["syncs"]
    assert t["test_whole"]["audit"] == "syncs" and t["test_whole"]["outcome"] == "failed"


PROJECT_OWN_CHECK = """
    import pytest, torch

    SEEN = []  # the mode each test found before the fixture armed it

    @pytest.fixture(autouse=True)
    def sync_check():  # the cudnn-frontend / VLLM_GPU_SYNC_CHECK=error pattern
        before = torch.cuda.get_sync_debug_mode()
        SEEN.append(before)
        torch.cuda.set_sync_debug_mode("error")
        yield
        torch.cuda.set_sync_debug_mode(before)
"""


def test_a_projects_own_error_mode_check_works_beside_the_plugin(pytester, run):
    """Issue 13: a conftest that arms sync-debug "error" around each test, under
    ``pytest --syncguard``: the project's RuntimeError surfaces unchanged, the mode is restored
    after each test, and syncguard still records what it saw."""
    pytester.makeconftest(PROJECT_OWN_CHECK)
    pytester.makepyfile(test_m="""
        import pytest, torch

        def test_the_projects_check_raises_its_own_error():
            x = torch.ones(4, device="cuda")
            with pytest.raises(RuntimeError, match="called a synchronizing CUDA operation"):
                x.sum().item()

        def test_the_mode_is_armed_inside_each_test():
            assert torch.cuda.get_sync_debug_mode() == 2

        def test_sync_free_code_passes():
            (torch.ones(4, device="cuda") * 2).sum()

        def test_zz_the_mode_was_restored_between_tests():
            import conftest
            # every test found the mode off before its fixture armed it: restored each time
            assert conftest.SEEN == [0, 0, 0, 0]
    """)
    res = run("--syncguard", "--syncguard-mode=record", "--syncguard-report=r.json")
    res.assert_outcomes(passed=4)
    assert "SystemError" not in res.stdout.str() + res.stderr.str()
    t = _tests(pytester)
    assert t["test_sync_free_code_passes"]["audit"] == "clean"
    assert t["test_the_projects_check_raises_its_own_error"]["audit"] in ("clean", "syncs")
