"""The profiler scenarios' verdicts (tests/gpu/profiler_scenarios.py's judge and summary): what
the GPU test asserts on and bench/detector_summary.py counts.

No GPU: the two runs' records are written here by hand in the shape the program writes them.
What a real profiler and region do is proven by tests/gpu/test_profiler_scenarios.py.
"""
from __future__ import annotations

from tests.gpu.profiler_scenarios import SCENARIOS, judge, name, summary

TRACE = {"gpu": {"Memcpy DtoH (Device -> Pageable)": 2, "sm90_xmma_gemm": 1},
         "calls": {"cudaDeviceSynchronize": 2, "cudaMemcpyAsync": 2, "cudaStreamSynchronize": 2}}
CUDA = {"detectors": ["cuda"], "weaker": None}
FELL_BACK = {"detectors": ["debug", "trace"],
             "weaker": {"detectors": "debug,trace", "reason": "cuptiSubscribe failed: ..."}}


def _run(trace=TRACE, error=None, regions=(), rc=0) -> dict:
    return {"scenario": "around-thread", "trace": trace, "profiler_error": error,
            "regions": list(regions), "returncode": rc}


def test_eight_scenarios_each_named_once():
    assert len(SCENARIOS) == 8 and len({name(*s) for s in SCENARIOS}) == 8
    assert name("inside", True) == "inside-thread" and name("after", False) == "after-alone"


def test_a_scenario_that_profiles_as_without_syncguard_passes():
    v = judge(_run(), _run(regions=[CUDA]))
    assert v["same_trace"] and v["profiler_error"] is None and v["regions_without_cuda"] == 0


def test_a_missing_sync_in_the_trace_a_profiler_error_and_an_unnamed_fallback_are_counted():
    fewer = {**TRACE, "calls": {**TRACE["calls"], "cudaStreamSynchronize": 1}}
    unnamed = {"detectors": ["debug", "trace"], "weaker": None}
    verdicts = [judge(_run(), _run(trace=fewer, regions=[FELL_BACK])),
                judge(_run(), _run(trace=None, error="RuntimeError: inserted.second INTERNAL "
                                   "ASSERT FAILED", regions=[unnamed])),
                judge(_run(), _run(rc=-6, regions=[CUDA]))]
    assert [v["same_trace"] for v in verdicts] == [False, False, True]
    assert [v["without_cuda_reasons"] for v in verdicts] == [["cuptiSubscribe failed: ..."], [], []]
    assert summary(verdicts) == {"scenarios": 3, "profiler_errors": 2, "regions_without_cuda": 2,
                                 "regions_without_cuda_unnamed": 1, "regions_handed_over": 0,
                                 "traces_differing": 2}


def test_a_bare_run_without_a_trace_never_counts_as_the_same_trace():
    assert not judge(_run(trace=None), _run(trace=None))["same_trace"]
