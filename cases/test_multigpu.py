"""Several GPUs: xdist workers pinned one per device, and what cross-device work does to the host.

Run on a machine with >= 2 GPUs as ``pytest cases/test_multigpu.py --syncguard -n <#GPUs>
--syncguard-report=...``. Each test checks that its worker sits on ``device_for_worker(...)`` and
records the sync kinds it observed as measurements (in the JSON report). We assert only what we
know (``.item()`` and ``torch.cuda.synchronize(1)`` block the host); for peer copies we record first.
No process is spawned here (so no NCCL; were one added, keep NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 in its environment).
"""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from syncguard.pytest_plugin.devices import device_for_worker  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                       reason="needs at least 2 CUDA devices"),
    # measured, not judged: the plugin records what each whole test did and never fails it
    pytest.mark.syncguard(mode="record"),
]


def _expected_device() -> int:
    dev = device_for_worker(os.environ.get("PYTEST_XDIST_WORKER"), torch.cuda.device_count())
    return 0 if dev is None else dev  # serial run: torch's default device


def _kinds(report) -> list[str]:
    return sorted({e.kind for e in report.syncs} | {f"allowed:{e.kind}" for e in report.allowed})


@pytest.fixture
def here(request):
    """The device this worker must be on; fails if the plugin did not pin it."""
    names = ("syncguard", "syncguard.plugin")
    if not any(request.config.pluginmanager.has_plugin(n) for n in names):
        pytest.skip("the syncguard plugin pins workers to devices; it is not loaded")
    dev = _expected_device()
    assert torch.cuda.current_device() == dev, (
        f"worker {os.environ.get('PYTEST_XDIST_WORKER')} is on cuda:{torch.cuda.current_device()}, "
        f"expected cuda:{dev}")
    return dev


@pytest.mark.parametrize("i", range(8))
def test_worker_pinned_to_its_device(here, syncguard, i):
    t = torch.ones(4, device="cuda")
    assert t.device.index == here
    syncguard.record("worker", os.environ.get("PYTEST_XDIST_WORKER"))
    syncguard.record("device", here)


def _other(here: int) -> int:
    return (here + 1) % torch.cuda.device_count()


@pytest.mark.parametrize("non_blocking", [False, True], ids=["blocking", "non_blocking"])
def test_peer_copy(here, syncguard, non_blocking):
    other = _other(here)
    x = torch.randn(1 << 20, device="cuda")
    torch.cuda.synchronize()
    with syncguard.audit() as rep:
        y = x.to(f"cuda:{other}", non_blocking=non_blocking)
    assert y.device.index == other
    syncguard.record("peer_access", torch.cuda.can_device_access_peer(here, other))
    syncguard.record("kinds", _kinds(rep))
    syncguard.record("notes", rep.notes)
    # measured on nvidia-h200-x2 (NV18, peer access on), reports/gpu/multigpu/: a device-to-device
    # peer copy makes the host wait for nothing, blocking or not
    assert _kinds(rep) == [], rep
    torch.cuda.synchronize(other)
    assert torch.equal(y.to(f"cuda:{here}"), x)


def test_round_trip_between_devices_in_one_region(here, syncguard):
    other = _other(here)
    x = torch.randn(4096, 64, device="cuda")
    with syncguard.audit() as rep:
        y = (x.to(f"cuda:{other}") * 2).to(f"cuda:{here}")
        z = y.sum(0)
    syncguard.record("kinds", _kinds(rep))
    assert z.device.index == here
    assert _kinds(rep) == [], rep  # measured clean on nvidia-h200-x2 (reports/gpu/multigpu/)


def test_synchronize_other_device_while_auditing_this_one(here, syncguard):
    other = _other(here)
    torch.randn(256, 256, device=f"cuda:{other}").matmul(torch.randn(256, 256, device=f"cuda:{other}"))
    with syncguard.audit() as rep:
        torch.cuda.synchronize(other)
    syncguard.record("kinds", _kinds(rep))
    assert "device_sync" in _kinds(rep), rep  # known: torch.cuda.synchronize blocks the host


def test_item_on_other_device(here, syncguard):
    other = _other(here)
    x = torch.randn(1024, device=f"cuda:{other}")
    with syncguard.audit() as rep:
        x.sum().item()
    syncguard.record("kinds", _kinds(rep))
    syncguard.record("ops", sorted({e.op or "" for e in rep.syncs}))
    # measured on nvidia-h200-x2: the read of another device's scalar is one blocking D2H copy
    assert _kinds(rep) == ["blocking_copy_d2h"], rep
    assert torch.cuda.current_device() == here  # touching another device must not move the worker
