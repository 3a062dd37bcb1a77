"""A small GPU project audited by ``pytest --syncguard``: known syncs, clean code, an allowed sync,
a partly guarded test and a hypothesis test that syncs only for some inputs.

Expected under ``--syncguard`` (mode fail): every ``test_sync_*`` fails with a table pointing at its
line, every ``test_clean_*`` passes, ``test_allowed_item`` passes as "allowed",
``test_partial_guard`` passes, and the hypothesis test fails, shrunk to ``k=33``.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from syncguard import SyncError

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_sync_item():
    x = torch.randn(1024, device="cuda")
    assert x.sum().item() == x.sum().item()


def test_sync_cuda_mask_index():
    x = torch.randn(4096, 8, device="cuda")
    y = x[x[:, 0] > 0]
    assert y.shape[1] == 8


def test_sync_device_synchronize():
    x = torch.randn(256, 256, device="cuda")
    x @ x
    torch.cuda.synchronize()


def test_sync_repeat_interleave_without_output_size():
    r = torch.arange(1, 4, device="cuda")  # made on the device: torch.tensor(list) would copy
    assert torch.repeat_interleave(torch.arange(3, device="cuda"), r).numel() == 6


def test_clean_matmul():
    x = torch.randn(512, 512, device="cuda")
    (x @ x).relu_()


def test_clean_repeat_interleave_with_output_size():
    r = torch.arange(1, 4, device="cuda")  # made on the device: torch.tensor(list) would copy
    torch.repeat_interleave(torch.arange(3, device="cuda"), r, output_size=6)


def test_clean_pinned_nonblocking_copy():
    host = torch.randn(1 << 16).pin_memory()
    host.to("cuda", non_blocking=True).mul_(2)


def test_clean_cpu_mask_assign():
    """torch>=2.9 assigns through a CPU mask without a sync (2.8: pageable copy + stream sync)."""
    emb = torch.randn(4096, 64, device="cuda")
    mask = torch.rand(4096) > 0.5
    rows = torch.randn(int(mask.sum()), 64, device="cuda")  # the count comes from the CPU mask
    emb[mask] = rows


@pytest.mark.allow_sync(reason="the loss is logged once per step", max=1)
def test_allowed_item():
    loss = torch.randn(64, device="cuda").square().mean()
    assert loss.item() >= 0


@pytest.mark.no_syncguard
def test_partial_guard(syncguard):
    """Only part of this test is guarded; the fixture also records a measurement."""
    x = torch.randn(1024, device="cuda")
    with syncguard.forbid():
        y = (x * 2).cumsum(0)
    with pytest.raises(SyncError):
        with syncguard.forbid():
            y[-1].item()
    syncguard.record("numel", y.numel())


@settings(max_examples=40, deadline=None, database=None, derandomize=True)
@given(st.integers(min_value=1, max_value=64))
def test_hypothesis_syncs_for_large_k(k):
    x = torch.randn(256, device="cuda")
    top = x.topk(k).values
    if k > 32:  # only large k reads a value back: the example hypothesis should shrink to is 33
        assert top[0].item() >= top[-1].item()
