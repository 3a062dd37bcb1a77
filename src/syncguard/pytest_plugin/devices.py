"""Which GPU an xdist worker uses: one device per worker, round-robin over the visible devices.

Device indices are logical (what torch sees after ``CUDA_VISIBLE_DEVICES``), so restricting the
visible set restricts the spread; with one visible device every worker shares it.
"""
from __future__ import annotations

import os
import re

_WORKER_ID = re.compile(r"gw(\d+)")


def worker_index(worker_id: str | None) -> int | None:
    """``"gw3"`` -> 3; ``None``/``""``/``"master"`` (not an xdist worker) -> None."""
    if worker_id in (None, "", "master"):
        return None
    m = _WORKER_ID.fullmatch(worker_id)
    if m is None:
        raise ValueError(f"xdist worker id {worker_id!r} is not of the form 'gw<N>'")
    return int(m.group(1))


def device_for_worker(worker_id: str | None, device_count: int) -> int | None:
    """The CUDA device a worker should use, or None to leave the current device alone.

    None when there is no device or the process is not an xdist worker (a serial run keeps
    torch's default device).
    """
    if not isinstance(device_count, int) or isinstance(device_count, bool) or device_count < 0:
        raise ValueError(f"device_count must be a non-negative int, got {device_count!r}")
    index = worker_index(worker_id)
    if device_count == 0 or index is None:
        return None
    return index % device_count


def current_worker_id() -> str | None:
    """The xdist worker id of this process, from the environment xdist sets in each worker."""
    return os.environ.get("PYTEST_XDIST_WORKER") or None


def assign(worker_id: str | None) -> int | None:
    """Make this worker's device current (initialises CUDA); returns it, or None if untouched."""
    import torch

    if not torch.cuda.is_available():
        return None
    device = device_for_worker(worker_id, torch.cuda.device_count())
    if device is not None:
        torch.cuda.set_device(device)
    return device
