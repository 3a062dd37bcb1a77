"""The cuda detector and the region API inside real programs, on a real GPU (issues 12 and 13).

Each scenario of tests/gpu/scenarios.py runs in a fresh process; its JSON result is judged here.
Kinds are judged against the profiler's runtime trace recorded in the same process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.gpu import skip_module_without_cuda

pytestmark = pytest.mark.gpu
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


skip_module_without_cuda()


def run(name, tmp_path, tag="", **extra_env):
    out = tmp_path / f"{name}{tag}.json"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               **extra_env)
    proc = subprocess.run([sys.executable, "-m", "tests.gpu.scenarios", name, str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    keep = os.environ.get("SYNCGUARD_SCENARIO_DIR")
    assert out.exists(), proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    if keep:
        os.makedirs(keep, exist_ok=True)
        with open(os.path.join(keep, f"{name}{tag}.json"), "w") as f:
            json.dump(data, f, indent=1)
    assert data["ok"], data.get("error")
    return data


RT = "builtins.RuntimeError"


def test_user_error_mode_raises_runtime_error_after_and_inside_an_audit(tmp_path):
    d = run("error_mode", tmp_path)
    assert d["detectors"] == ["cuda"]
    assert d["after_audit"] == RT and d["inside_audit"] == RT
    assert d["state_equal_after"], (d["state_before"], d["state_after"])


def test_oom_and_argument_errors_keep_their_type(tmp_path):
    d = run("exception_types", tmp_path)
    assert d["oom_bare"] == "torch.OutOfMemoryError"
    assert d["oom_inside"] == d["oom_after"] == d["oom_bare"]
    assert d["arg_bare"] == RT
    assert d["arg_inside"] == d["arg_after"] == RT


#: (pageable/pinned method, callback CUPTI calls): the C callback with both methods, and the
#: Python callback (the fallback where the C one is not built) with the default method
HOW = [("activity", "c"), ("pointer", "c"), ("pointer", "python")]


@pytest.mark.parametrize("hostmem,callback", HOW)
def test_kinds_agree_with_the_profilers_runtime_trace(tmp_path, hostmem, callback):
    d = run("kinds", tmp_path, f"-{hostmem}-{callback}", SYNCGUARD_CUDA_HOSTMEM=hostmem,
            SYNCGUARD_CUDA_CALLBACK=callback)
    assert all(v["detectors"] == ["cuda"] for v in d["ops"].values())
    assert d["callback"] == ("C callback" if callback == "c" else
                             "Python callback (SYNCGUARD_CUDA_CALLBACK=python)")
    bad = {k: v for k, v in d["ops"].items() if v["cuda"] != v["profile"] or not v["lines_ok"]}
    assert not bad, json.dumps(bad, indent=1)


def test_a_kernel_outliving_its_profiled_region_brings_it_no_sync(tmp_path):
    """The region's marker has a GPU-side copy in the trace that lasts until the kernel ends,
    past the region and over the profiler's own stop-time sync; only the host range counts."""
    d = run("profile_async_tail", tmp_path)
    assert d["detectors"] == ["profile"]
    markers = [r for r in d["rows"] if r["name"].startswith("syncguard::")]
    host = [m for m in markers if not m["device"].endswith("CUDA")]
    gpu = [m for m in markers if m["device"].endswith("CUDA")]
    # the case itself is there: a GPU-side range of the marker reaching past the host range
    assert len(host) == 1 and gpu and max(m["end"] for m in gpu) > host[0]["end"], markers
    assert d["events"] == [], json.dumps(d, indent=1)


#: the profiler's GPU memcpy row for each copy (Kineto names direction and host memory)
_MEMCPY_ROW = {"blocking_copy_d2h": "DtoH (Device -> Pageable)",
               "blocking_copy_h2d": "HtoD (Pageable -> Device)",
               "pageable_copy": "HtoD (Pageable -> Device)"}


@pytest.mark.parametrize("callback", ["c", "python"])
def test_syncs_and_copies_made_straight_to_the_driver_are_seen(tmp_path, callback):
    """An extension's cuMemcpyDtoH_v2 / cuCtxSynchronize / ...: one event each, the declared
    kind, on the calling line; the pinned async copy makes none. In the same process, a CUPTI
    census of both whole API domains must show that driver API and no runtime call, and the
    profiler's GPU memcpy row the copy's direction and host memory."""
    from tests.gpu.scenarios import DRIVER_OPS

    d = run("driver_calls", tmp_path, f"-{callback}", SYNCGUARD_CUDA_CALLBACK=callback)
    assert set(d["ops"]) | set(d["skipped"]) == set(DRIVER_OPS) and d["skipped"] in (
        [], ["cuCtxSynchronize_v2"])
    bad = {}
    for name, r in d["ops"].items():
        api, want = name.split("/")[0], r["want"]
        got = [(e["kind"], e["file"] == d["file"]) for e in r["events"]]
        ok = r["rc"] == 0 and r["detectors"] == ["cuda"] and got == ([(want, True)] if want else [])
        ok = ok and f"drv {api}" in r["census"] and not any(k.startswith("rt ") for k in r["census"])
        if want in _MEMCPY_ROW:
            ok = ok and any(_MEMCPY_ROW[want] in m for m in r["profiler_memcpy"])
        if not want:
            ok = ok and any("Pinned" in m for m in r["profiler_memcpy"])
        if not ok:
            bad[name] = r
    assert not bad, json.dumps(bad, indent=1)


def test_other_threads_syncs_stay_in_their_own_region(tmp_path):
    d = run("threads", tmp_path)
    assert d["main_events"] == [] and d["main2_events"] == []
    assert len(d["worker_events"]) == 20
    assert {e["thread"] for e in d["worker_events"]} == {"bg"}


def test_a_profiler_opened_inside_a_region_still_records(tmp_path):
    d = run("profiler_inside", tmp_path)
    assert d["profiler_saw_sync"]
    assert any("torch.profiler started" in n for n in d["notes"])
    assert len(d["events"]) >= 2  # before (cuda) and after (debug) the profiler
    assert d["later_detectors"][:1] != ["cuda"] and d["later_reason"]
    assert d["later_events"]


def test_after_the_profiler_ran_first_the_region_falls_back_and_says_why(tmp_path):
    d = run("profiler_first", tmp_path)
    assert d["detectors"] == ["debug", "trace"] and "cuda" in d["reason"]
    assert d["events"]


def _compile_broken_here() -> str | None:
    """Why torch.compile's default backend fails in this environment without syncguard, or None.
    A torch carried onto the GPU machine beside the image's triton, built for another torch, can
    lack what Inductor imports from it (2.8.0: ``triton_key``)."""
    code = ("import torch; f = torch.compile(lambda x: x * 2 + 1, fullgraph=True); "
            "f(torch.ones(4, device='cuda')); torch.cuda.synchronize()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if proc.returncode == 0:
        return None
    lines = [line for line in proc.stderr.splitlines() if "Error" in line]
    return lines[-1].strip() if lines else f"exit {proc.returncode}"


def test_compile_inside_a_region_is_a_compile_phase_and_fullgraph_works(tmp_path):
    try:
        d = run("compile_phase", tmp_path)
    except AssertionError:
        why = _compile_broken_here()
        if why:  # the same compile, bare, fails too: nothing of syncguard's to judge here
            pytest.skip(f"torch.compile fails in this environment without syncguard: {why}")
        raise
    assert d["first_clean"], d["first_call"]
    assert all(e["phase"] == "compile" for e in d["first_call"])
    assert d["steady"] == []
    assert all(p == "compile" for p in d["counted"])


def test_graph_capture_setup_is_its_own_phase_and_capture_is_unharmed(tmp_path):
    d = run("graph_capture", tmp_path)
    assert d["capture_clean"], d["capture"]
    assert d["capture"] and all(e["phase"] == "graph_capture" for e in d["capture"])
    assert d["replay"] == [] and d["replay_ok"]
    assert d["item_in_capture"] is not None  # the user's own capture error, not ours


def test_syncs_in_a_cuda_backward_pass_reach_the_callers_region(tmp_path):
    d = run("backward", tmp_path)
    assert [e["kind"] for e in d["events"]] == ["blocking_copy_d2h"], d
    (e,) = d["events"]
    assert e["line"] == d["py_backward_line"] and e["thread"].startswith("autograd engine")
    assert d["engine_restored"]


def test_profile_detector_keeps_other_threads_syncs_out_of_the_region(tmp_path):
    d = run("profile_threads", tmp_path)
    assert [e["line"] for e in d["events"]] == [d["main_line"]], d["events"]
    assert {e["thread"] for e in d["events"]} == {"MainThread"}


def test_graph_capture_with_every_detector_on_gives_the_bare_results(tmp_path):
    d = run("graph_capture_all_detectors", tmp_path)
    assert d["audited"] == d["bare"]
    assert "races" in d["detectors"] and d["races"] == []
    # the captured ops are not checked (they run at replay), and the report says so
    assert any("captured into a CUDA graph" in n for n in d["notes"]), d["notes"]
    assert all(e["phase"] in ("graph_capture", "run") for e in d["events"]), d["events"]


def test_profile_detector_links_every_sync_of_a_region(tmp_path):
    d = run("profile_links", tmp_path)
    got = sorted((e["line"], e["kind"], e["op"], "profile" in e["detectors"]) for e in d["events"])
    l1, l2, l3 = d["lines"]
    # .cpu() is a device-to-host copy the host waits for; .item() reads one element the same way
    assert got == [(l1, "blocking_copy_d2h", "aten::copy_", True),
                   (l2, "blocking_copy_d2h", "aten::_local_scalar_dense", True),
                   (l3, "blocking_copy_d2h", "aten::copy_", True)], d
