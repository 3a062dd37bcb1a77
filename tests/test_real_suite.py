"""tools/real_suite.py on a tiny suite of its own, on the CPU (the plumbing; the real run is
kornia's on the H200, reports/real-suite/kornia/): run, summarize, and recheck, which reruns the
tests whose outcome differed under syncguard to tell a reproducible change from a flaky test.
Here one test is made to fail whenever the plugin is active, so it must reproduce."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "real_suite.py"
SUITE = '''
class TestThing:
    def test_ok(self):
        pass

    def test_differs(self, request):
        assert not request.config.getoption("syncguard", default=False)
'''


@pytest.fixture
def suite(tmp_path):
    d = tmp_path / "suite"
    (d / "tests").mkdir(parents=True)
    (d / "tests" / "test_fake.py").write_text(SUITE)
    return d


def tool(*args):
    """The tool in a subprocess, and the pytest runs it starts, on this checkout's syncguard: an
    installed one (another checkout's, in development) wrote reports this one cannot read."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    proc = subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_run_summarize_recheck_tell_a_reproducible_difference(suite, tmp_path):
    out = tmp_path / "out"
    tool("run", suite, out, 1, "--", "-p", "no:cacheprovider", "-q", "tests")
    rounds = json.loads((out / "real-suite.json").read_text())["rounds"]
    assert [r["name"] for r in rounds] == ["bare-1", "syncguard-1"]
    tool("recheck", suite, out, 2, "--", "-p", "no:cacheprovider", "-q")
    doc = json.loads((out / "recheck.json").read_text())
    assert doc["tests"] == [{"key": "tests.test_fake.TestThing::test_differs",
                             "nodeid": "tests/test_fake.py::TestThing::test_differs",
                             "bare": ["passed", "passed"], "syncguard": ["failed", "failed"]}]
    text = tool("summarize", out)
    assert "| syncguard-1 | 1 |" in text and "1: tests.test_fake.TestThing::test_differs" in text
    assert ("| `tests/test_fake.py::TestThing::test_differs` | passed, passed | failed, failed | "
            "reproduces: syncguard changes the outcome |") in text


@pytest.mark.parametrize("bare, sg, verdict", [
    (["passed", "passed"], ["failed", "failed"], "reproduces"),
    (["passed", "failed"], ["failed", "failed"], "flaky"),
    (["passed", "passed"], ["passed", "passed"], "did not reproduce"),
])
def test_recheck_verdicts(bare, sg, verdict):
    sys.path.insert(0, str(ROOT / "tools"))
    import real_suite

    assert real_suite.recheck_verdict(bare, sg).startswith(verdict)


def test_a_junit_key_with_no_test_file_is_a_one_line_error(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    import real_suite

    with pytest.raises(ValueError, match="no test file of .* matches 'pkg.mod.C::t'"):
        real_suite.node_id(tmp_path, "pkg.mod.C::t")
