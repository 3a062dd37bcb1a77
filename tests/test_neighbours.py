"""Another CUPTI tool in the process (nsys, compute-sanitizer, a tool injected through
CUDA_INJECTION64_PATH, a subscriber slot already taken): the cuda detector steps aside with a
reason naming it, never crashing and never changing the program.

No GPU and no real tool here: the environments are dictionaries, the mapped libraries a written
``/proc/self/maps``-shaped file, torch a stand-in that says it is a CUDA build, and libcupti the
fake of tests/test_detect.py. What a real nsys does is not proven here.
"""
from __future__ import annotations

import os
import types

import pytest

from syncguard import detectors as registry
from syncguard.detectors.cuda import neighbours
from syncguard.detectors.cuda.detector import CuptiHub
from syncguard.detectors.seam import DetectorUnavailable

MULTIPLE = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"


def _maps(tmp_path, *paths: str) -> str:
    """A maps file listing ``paths`` as mapped libraries, beside torch's own libcupti."""
    lines = ["7f0000000000-7f0000001000 r-xp 00000000 08:01 1 /usr/lib/libc.so.6",
             "7f0000002000-7f0000003000 r-xp 00000000 08:01 2 /site/nvidia/cu13/lib/libcupti.so.13",
             "7f0000004000-7f0000005000 rw-p 00000000 00:00 0 "]
    lines += [f"7f10000{i:05d}-7f10000{i + 1:05d} r-xp 00000000 08:01 9 {p}"
              for i, p in enumerate(paths)]
    f = tmp_path / "maps"
    f.write_text("\n".join(lines) + "\n")
    return str(f)


@pytest.mark.parametrize("environ, mapped, want", [
    ({}, (), None),  # a plain process: torch's own libcupti is no neighbour
    ({"PATH": "/bin", "NSYS": "x"}, (), None),  # a name that only starts alike
    ({"CUDA_INJECTION64_PATH": "/opt/nsys/target-linux-x64/libToolsInjection64.so"}, (),
     "another CUPTI tool is injected into this process (Nsight Systems (nsys)): "
     "CUDA_INJECTION64_PATH=/opt/nsys/target-linux-x64/libToolsInjection64.so; CUPTI is left to it"),
    ({"CUDA_INJECTION64_PATH": "/home/me/libmytool.so"}, (),
     "another CUPTI tool is injected into this process: CUDA_INJECTION64_PATH="
     "/home/me/libmytool.so; CUPTI is left to it"),
    ({"CUDA_INJECTION64_PATH": "  "}, (), None),  # set but empty: nothing is injected
    ({"NSYS_PROFILING_SESSION_ID": "3"}, (),
     "another CUPTI tool runs this process (Nsight Systems (nsys)); CUPTI is left to it"),
    ({}, ("/opt/cuda/compute-sanitizer/libsanitizer-collection.so",),
     "another CUPTI tool runs this process (compute-sanitizer); CUPTI is left to it"),
    ({"COMPUTE_SANITIZER_TOOL": "memcheck"}, ("/x/libsanitizer-public.so",),
     "another CUPTI tool runs this process (compute-sanitizer); CUPTI is left to it"),
    ({"NSYS_X": "1"}, ("/x/libsanitizer-public.so",),
     "another CUPTI tool runs this process (compute-sanitizer, Nsight Systems (nsys)); CUPTI is "
     "left to it"),
])
def test_a_neighbour_is_named_from_the_environment_and_the_mapped_libraries(
        tmp_path, environ, mapped, want):
    assert neighbours.present(environ, _maps(tmp_path, *mapped)) == want


def test_unreadable_maps_are_no_neighbour_and_no_error(tmp_path):
    assert neighbours.mapped_tools(str(tmp_path / "missing")) == []
    assert neighbours.present({}, str(tmp_path / "missing")) is None


def test_the_real_process_is_asked_once(monkeypatch, tmp_path):
    monkeypatch.setattr(neighbours, "_found", neighbours._UNASKED)
    monkeypatch.setenv("NSYS_PROFILING_SESSION_ID", "1")
    first = neighbours.present(maps=_maps(tmp_path))
    assert first and "Nsight Systems" in first
    monkeypatch.delenv("NSYS_PROFILING_SESSION_ID")
    assert neighbours.present(maps=_maps(tmp_path)) == first  # the environment is read once
    assert os.environ.get("NSYS_PROFILING_SESSION_ID") is None  # and never changed


@pytest.mark.parametrize("error, holder, environ, want", [
    ("CUPTI_ERROR_NOT_INITIALIZED", None, {}, "cuptiSubscribe failed: CUPTI_ERROR_NOT_INITIALIZED"),
    (MULTIPLE, "CUPTI for Nsight Systems", {},
     f"cuptiSubscribe failed: {MULTIPLE}: CUPTI is held by 'CUPTI for Nsight Systems'"),
    (MULTIPLE, None, {"NSYS_X": "1"}, f"cuptiSubscribe failed: {MULTIPLE}: another CUPTI tool "
     "runs this process (Nsight Systems (nsys)); CUPTI is left to it"),
    (MULTIPLE, None, {}, f"cuptiSubscribe failed: {MULTIPLE}: another CUPTI client holds the one "
     "subscriber slot (torch.profiler earlier in this process, or a tool not recognised)"),
])
def test_a_refused_subscribe_names_who_holds_cupti(tmp_path, error, holder, environ, want):
    assert neighbours.refused(error, holder, environ, _maps(tmp_path)) == want


@pytest.fixture
def cuda_torch(monkeypatch):
    """torch as a CUDA build says it is (a stand-in: nothing is loaded past the neighbour check
    when a neighbour is found), and the process's neighbour answer forgotten."""
    fake = types.SimpleNamespace(__version__="2.11.0+cu130",
                                 version=types.SimpleNamespace(cuda="13.0"))
    monkeypatch.setitem(__import__("sys").modules, "torch", fake)
    monkeypatch.setattr(neighbours, "_found", neighbours._UNASKED)
    return fake


def test_the_cuda_detector_steps_aside_for_an_injected_tool(monkeypatch, cuda_torch):
    monkeypatch.setenv("CUDA_INJECTION64_PATH", "/opt/nvidia/nsight-systems/libToolsInjection64.so")
    hub = CuptiHub()
    cuda = registry.get("cuda")
    monkeypatch.setattr(cuda, "hub", hub)
    why = cuda.unavailable()
    assert why.startswith("another CUPTI tool is injected into this process (Nsight Systems")
    assert hub.lib is None  # libcupti was not even loaded
    with pytest.raises(DetectorUnavailable, match="another CUPTI tool is injected"):
        cuda.arm(types.SimpleNamespace(report=types.SimpleNamespace(notes=[])))  # cuda by name
    assert not hub.subscribed and hub.users == 0 and hub.lib is None
    # auto resolves to the fallback with that reason (the region's detector reason, and so the
    # test's weaker mark)
    names, reason = registry.resolve(("auto",))
    assert names == ("debug", "trace")
    assert reason == f"debug,trace: cuda detector unavailable ({why})"


def test_a_subscribe_refused_for_a_taken_slot_names_the_neighbour(monkeypatch):
    from tests.test_detect import FakeHub, FakeRegion

    monkeypatch.setattr(neighbours, "_found", neighbours._UNASKED)
    monkeypatch.setenv("COMPUTE_SANITIZER_TOOL", "memcheck")
    hub = FakeHub(subscribe_error=39)
    hub.lib.error_name = lambda code: MULTIPLE if code == 39 else f"err{code}"
    with pytest.raises(DetectorUnavailable) as e:
        hub.acquire(FakeRegion())
    assert str(e.value) == (f"cuptiSubscribe failed: {MULTIPLE}: another CUPTI tool runs this "
                            "process (compute-sanitizer); CUPTI is left to it")
    assert hub.users == 0 and not hub.subscribed
