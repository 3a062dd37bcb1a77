"""torch.profiler beside syncguard's regions, on a real GPU (issue 44, "Beside the profiler").

A profiler session before, around, inside and after a region, each with and without another
Python thread alive (tests/gpu/profiler_scenarios.py, each run in fresh processes). Ground
truth is the same program without syncguard, profiled in its own process in the same test:
under syncguard the profiler must not raise, its trace must hold the same kernels, copies and
sync calls, and every region must have run the cuda detector or say why not (its ``weaker``
mark, as the test's row in a session report would carry it).

The tests' names hold "profile", so tools/gpu_suite.sh's ``-k "not profile"`` split leaves them
to its own ``-k profile`` step; each scenario runs in processes of its own anyway.
SYNCGUARD_SCENARIO_DIR keeps every run's record (bench/detector_summary.py reads them).
"""
from __future__ import annotations

import os

import pytest

from tests.gpu import profiler_scenarios as ps
from tests.gpu import skip_module_without_cuda

pytestmark = pytest.mark.gpu


skip_module_without_cuda()


@pytest.mark.parametrize("where, thread", ps.SCENARIOS, ids=[ps.name(*s) for s in ps.SCENARIOS])
def test_profiler_beside_regions(where, thread, tmp_path):
    folder = os.environ.get("SYNCGUARD_SCENARIO_DIR") or str(tmp_path)
    os.makedirs(folder, exist_ok=True)
    v = ps.scenario(where, thread, folder)
    assert v["bare_profiler_error"] is None and v["trace"]["bare"], v  # the program itself works
    assert v["returncodes"] == [0, 0], v
    assert v["profiler_error"] is None, v
    assert v["same_trace"], v["trace"]
    assert v["regions"] >= 1 and v["without_cuda_unnamed"] == 0, v["region_records"]
