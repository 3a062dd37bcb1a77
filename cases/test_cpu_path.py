"""The CPU path of multimodal batching asks CUDA for nothing; the CUDA path pins and never waits.

``syncguard.cpupath.cpu_path_audit`` flags pin_memory requests and CUDA stream/event use with
the user's file:line. These cases run ``cases/batching.py`` under it: the correct batching is
clean on the CPU, the deliberately wrong one is flagged at its line, and on the GPU the CUDA
path pins (seen by the same audit) without a host<->device sync (``syncguard.forbid``).
"""
from __future__ import annotations

import inspect

import pytest
import torch

import syncguard
from syncguard.cpupath import cpu_path_audit

from cases import batching
from cases.batching import batch_fields, batch_fields_always_pinned

CUDA = torch.cuda.is_available()


def _items(counts=(3, 0, 5), hidden=6, seed=0):
    """Per-item fields as a processor hands them over: variable patch counts per image."""
    g = torch.Generator().manual_seed(seed)
    return [{"pixel_values": torch.randn(n * 4, 12, generator=g),
             "image_embeds": torch.randn(n, hidden, generator=g).to(torch.bfloat16),
             "grid_thw": torch.tensor([[1, 2, max(n, 1) * 2]])} for n in counts]


def _line_of(func, needle: str) -> int:
    """The line in ``func``'s source containing ``needle`` (not hard-coded, so edits move it)."""
    lines, start = inspect.getsourcelines(func)
    hits = [start + i for i, text in enumerate(lines) if needle in text]
    assert len(hits) == 1, f"{needle!r} occurs {len(hits)} times in {func.__name__}"
    return hits[0]


@pytest.mark.parametrize("counts", [(3, 0, 5), (1,), (0, 0)], ids=["mixed", "one", "empty-items"])
def test_cpu_batching_is_clean_and_correct(counts):
    items = _items(counts)
    with cpu_path_audit() as report:
        batch = batch_fields(items, "cpu")
    assert report.clean, report.format()
    for key in items[0]:
        expected = torch.cat([it[key] for it in items])
        assert batch[key].device.type == "cpu" and not batch[key].is_pinned()
        assert torch.equal(batch[key], expected)


def test_no_items_gives_no_fields():
    with cpu_path_audit() as report:
        assert batch_fields([], "cpu") == {}
    assert report.clean


def test_mismatched_items_raise_clear_errors():
    items = _items((2, 3))
    items[1] = dict(items[1], image_embeds=items[1]["image_embeds"].float())
    with pytest.raises(ValueError, match=r"items\[1\]\['image_embeds'\] is torch.float32"):
        batch_fields(items, "cpu")
    with pytest.raises(ValueError, match=r"items\[1\] has fields"):
        batch_fields([{"a": torch.ones(1)}, {"b": torch.ones(1)}], "cpu")


def test_always_pinned_batching_is_flagged_at_its_line():
    line = _line_of(batch_fields_always_pinned, "pin_memory=pin_memory)")
    with cpu_path_audit() as report:
        try:
            batch_fields_always_pinned(_items(), "cpu")
        except RuntimeError:
            # Only a build without an accelerator refuses to pin; with CUDA it silently pins.
            assert not CUDA
    assert report.findings, "the audit missed pin_memory=True on the CPU path"
    first = report.findings[0]
    assert first.api == "torch.empty(pin_memory=True)"
    assert (first.filename, first.lineno) == (batching.__file__, line), report.format()
    assert first.function == "batch_fields_always_pinned"


def test_always_pinned_batching_without_the_flag_is_clean():
    """The audit flags the request, not the function: the same code with pin_memory=False is
    clean (so the test above fails for the right reason)."""
    items = _items()
    with cpu_path_audit() as report:
        batch = batch_fields_always_pinned(items, "cpu", pin_memory=False)
    assert report.clean, report.format()
    assert torch.equal(batch["pixel_values"], torch.cat([it["pixel_values"] for it in items]))


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs CUDA: the pinned non-blocking path")
def test_cuda_batching_pins_without_a_sync():
    items = _items((3, 0, 5, 2))
    with syncguard.allow("test setup: warm-up (first pinned allocation, CUDA init)"):
        batch_fields(items, "cuda")
        torch.cuda.synchronize()
    pin_line = _line_of(batch_fields, "pin_memory=True)")
    # The cpu-path audit innermost: it should see batch_fields, not the sync audits' set-up.
    with syncguard.audit() as report, syncguard.forbid(), cpu_path_audit() as cpu_report:
        batch = batch_fields(items, "cuda")
    assert report.clean and not report.allowed, syncguard.records.events.format_report(report)
    # The CUDA path is supposed to pin: the audit sees it, at the line that asks.
    assert {(f.filename, f.lineno) for f in cpu_report.findings} == {(batching.__file__, pin_line)}
    with syncguard.allow("test setup: copying results back to compare"):
        for key in items[0]:
            assert batch[key].is_cuda
            assert torch.equal(batch[key].cpu(), torch.cat([it[key] for it in items]))
