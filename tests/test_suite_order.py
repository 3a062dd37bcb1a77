"""The suite's own plumbing: a test's outcome does not depend on which tests ran before it in
its process (xdist hands each worker a different, load-dependent share and order)."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: the first test of its process to use a TorchDispatchMode, inside a pytester test: the mode's
#: first use imports torch._dynamo, and pytester's teardown takes back what the test imported
FIRST = """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def test_a_mode_first(pytester):
        with Passthrough():
            assert (torch.ones(2) + 1).tolist() == [2.0, 2.0]
"""

#: a later test that needs torch._dynamo (torch.compile does)
LATER = """
    import torch

    def test_compile_later():
        f = torch.compile(lambda x: x + 1, backend="eager")
        assert f(torch.ones(2)).tolist() == [2.0, 2.0]
"""


def test_torch_dynamo_survives_a_pytester_test_that_imported_it_first(pytester, monkeypatch):
    """tests/conftest.py imports torch._dynamo before any test: imported first inside a
    pytester test, it was taken out of sys.modules again, and the next import raised (its C++
    operator library registered twice), failing every later test of that worker that compiled
    or predicted. The two tests run in one fresh process with this suite's conftest."""
    pytester.makepyfile(test_1_first=FIRST, test_2_later=LATER)
    env_path = os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "")
                                             .split(os.pathsep) if p])
    monkeypatch.setenv("PYTHONPATH", env_path)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "pytester",
                                        "-p", "tests.conftest", "-p", "no:syncguard",
                                        timeout=180)
    res.assert_outcomes(passed=2)
