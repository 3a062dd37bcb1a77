"""Unit tests of ``syncguard.cpupath.cpu_path_audit``: what it flags, where it says the call
was, and that it always puts ``torch.cuda`` back (exceptions, nesting, failed set-up).

These run on any machine. On a CPU-only build the flagged calls raise after being recorded;
the tests accept that error only where CUDA is absent.
"""
from __future__ import annotations

import inspect
import pathlib
import threading

import pytest
import torch
import torch.cuda as tc

from syncguard import cpupath
from syncguard.cpupath import WRAPPED_NAMES, cpu_path_audit


def _source_line(lineno: int) -> str:
    """Line ``lineno`` of this file, as written (the file closed after reading)."""
    return pathlib.Path(__file__).read_text().splitlines()[lineno - 1]


CUDA = torch.cuda.is_available()


def _here() -> int:
    """The caller's next line: the line of the call under test."""
    return inspect.currentframe().f_back.f_lineno + 1


def _attempt(fn):
    """Run a CUDA-only call; without CUDA it raises after the audit has recorded it."""
    try:
        return fn()
    except (RuntimeError, NotImplementedError, AssertionError):
        if CUDA:
            raise
        return None


def _originals():
    return {name: getattr(tc, name) for name in WRAPPED_NAMES}


@pytest.mark.parametrize("factory", [
    lambda: torch.empty(3, pin_memory=True),
    lambda: torch.zeros(2, 2, pin_memory=True),
    lambda: torch.tensor([1, 2], pin_memory=True),
    lambda: torch.empty_like(torch.ones(2), pin_memory=True),
    lambda: torch.ones(2).new_empty(4, pin_memory=True),
], ids=["empty", "zeros", "tensor", "empty_like", "new_empty"])
def test_pin_memory_requests_are_flagged_at_the_callers_line(factory):
    with cpu_path_audit() as report:
        _attempt(factory)
    assert len(report.findings) == 1, report.format()
    f = report.findings[0]
    assert f.api.endswith("(pin_memory=True)")
    # the lambda's line is where the request is written
    assert f.filename == __file__ and f.function == "<lambda>"
    assert "pin_memory=True" in _source_line(f.lineno)


def test_tensor_pin_memory_is_flagged_with_file_and_line():
    t = torch.ones(4)
    with cpu_path_audit() as report:
        line = _here()
        _attempt(lambda: t.pin_memory())
    assert [(f.api, f.filename, f.lineno) for f in report.findings] == [
        ("Tensor.pin_memory()", __file__, line)]
    assert str(report.findings[0]).startswith(f"Tensor.pin_memory() at {__file__}:{line}")


def test_record_stream_is_flagged():
    t = torch.ones(4)
    stream = torch.Stream(device="cpu")
    with cpu_path_audit() as report:
        _attempt(lambda: t.record_stream(stream))
    assert [f.api for f in report.findings] == ["Tensor.record_stream()"]


def test_plain_cpu_work_and_pin_memory_false_are_clean():
    with cpu_path_audit() as report:
        x = torch.empty(3, pin_memory=False)
        y = torch.cat([torch.ones(2), torch.zeros(1)])
        (x + y).sum()
    assert report.clean and report.format() == "cpu path: clean"


@pytest.mark.parametrize("name, call", [
    ("Stream", lambda: tc.Stream()),
    ("Event", lambda: tc.Event()),
    ("current_stream", lambda: tc.current_stream()),
], ids=["Stream", "Event", "current_stream"])
def test_cuda_stream_and_event_apis_are_flagged(name, call):
    with cpu_path_audit() as report:
        _attempt(call)
    assert [f.api for f in report.findings] == [f"torch.cuda.{name}()"], report.format()
    f = report.findings[0]  # at the lambda that makes the call
    assert f.filename == __file__
    assert f"tc.{name}()" in _source_line(f.lineno)


def test_cuda_stream_context_is_flagged_even_as_a_no_op():
    with cpu_path_audit() as report:
        line = _here()
        with torch.cuda.stream(None):
            pass
    assert [(f.api, f.lineno) for f in report.findings] == [("torch.cuda.stream()", line)]


def test_isinstance_still_works_while_wrapped():
    with cpu_path_audit():
        assert torch.cuda.Stream is not cpupath._saved["Stream"]
        assert not isinstance(object(), torch.cuda.Stream)
        assert issubclass(cpupath._saved["Stream"], torch.cuda.Stream)
        assert torch.cuda.Stream.__name__ == "Stream"
        if CUDA:
            s = torch.cuda.current_stream()  # made by torch, not by the wrapper
            assert isinstance(s, torch.cuda.Stream)
            assert isinstance(torch.cuda.Stream(), cpupath._saved["Stream"])


def test_names_are_restored_after_normal_exit():
    before = _originals()
    with cpu_path_audit():
        assert all(getattr(tc, n) is not before[n] for n in WRAPPED_NAMES)
    assert _originals() == before
    assert not cpupath._active and not cpupath._saved


def test_names_are_restored_when_the_block_raises():
    before = _originals()
    with pytest.raises(KeyError, match="boom"):
        with cpu_path_audit() as report:
            _attempt(lambda: tc.Event())
            raise KeyError("boom")
    assert _originals() == before
    assert [f.api for f in report.findings] == ["torch.cuda.Event()"]  # kept for the post-mortem
    assert torch._C._len_torch_function_stack() == 0, "the function mode was left pushed"


def test_nested_audits_outer_sees_inner_once():
    before = _originals()
    with cpu_path_audit() as outer:
        _attempt(lambda: torch.ones(2).pin_memory())
        with cpu_path_audit() as inner:
            _attempt(lambda: torch.empty(2, pin_memory=True))
            _attempt(lambda: tc.Event())
        assert all(getattr(tc, n) is not before[n] for n in WRAPPED_NAMES), \
            "leaving the inner audit must not unwrap for the outer one"
        _attempt(lambda: tc.Stream())
    assert [f.api for f in inner.findings] == ["torch.empty(pin_memory=True)",
                                               "torch.cuda.Event()"]
    assert [f.api for f in outer.findings] == ["Tensor.pin_memory()",
                                               "torch.empty(pin_memory=True)",
                                               "torch.cuda.Event()", "torch.cuda.Stream()"]
    assert _originals() == before


def test_nested_audits_restore_when_inner_raises():
    before = _originals()
    with cpu_path_audit() as outer:
        with pytest.raises(ValueError):
            with cpu_path_audit():
                raise ValueError("inner")
        assert all(getattr(tc, n) is not before[n] for n in WRAPPED_NAMES)
        _attempt(lambda: tc.Event())
    assert len(outer.findings) == 1
    assert _originals() == before


def test_other_threads_are_not_recorded():
    seen = []

    def worker():
        seen.append(_attempt(lambda: tc.Event()))

    with cpu_path_audit() as report:
        th = threading.Thread(target=worker)
        th.start()
        th.join()
    assert seen and report.clean, report.format()


def test_failed_setup_leaves_torch_cuda_untouched(monkeypatch):
    before = _originals()
    real = cpupath._wrap_class

    def flaky(orig, label, what):
        if label == "torch.cuda.Event()":
            raise RuntimeError("cannot wrap")
        return real(orig, label, what)

    monkeypatch.setattr(cpupath, "_wrap_class", flaky)
    with pytest.raises(RuntimeError, match="cannot wrap"):
        with cpu_path_audit():
            pass
    assert _originals() == before
    assert not cpupath._active and not cpupath._saved


def test_a_wrapped_call_made_inside_another_is_one_finding(monkeypatch):
    """torch's current_stream() builds a Stream through the (wrapped) module name: the user
    asked once, so the audit reports once."""
    def current_stream_like_torch(device=None):
        return _attempt(lambda: tc.Stream())

    monkeypatch.setattr(tc, "current_stream", current_stream_like_torch)
    with cpu_path_audit() as report:
        tc.current_stream()
    assert [f.api for f in report.findings] == ["torch.cuda.current_stream()"]
