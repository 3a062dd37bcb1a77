"""Host<->device copies: which host memory would be pinned, and the facts a copy is decided by.

Pinned host memory cannot exist on a CPU build, so "this CPU tensor would be pinned" is
remembered beside the tensor (a weak map) rather than in it.
"""
from __future__ import annotations

import weakref
from typing import Any

import torch

__all__ = ["mark_pinned", "is_marked_pinned", "copy_facts"]

_pinned: dict[int, weakref.ref] = {}  # id -> weak reference (tensors compare elementwise)


def mark_pinned(t: torch.Tensor) -> torch.Tensor:
    key = id(t)
    _pinned[key] = weakref.ref(t, lambda _r, key=key: _pinned.pop(key, None))
    return t


def is_marked_pinned(t: torch.Tensor) -> bool:
    ref = _pinned.get(id(t))
    return ref is not None and ref() is t


def _host(t: torch.Tensor) -> str:
    return "pinned" if is_marked_pinned(t) else "pageable"


def copy_facts(src_cuda: bool, dst_cuda: bool, host_tensor: torch.Tensor | None,
               non_blocking: bool) -> dict[str, Any]:
    direction = {(False, True): "h2d", (True, False): "d2h"}.get((src_cuda, dst_cuda), "d2d")
    facts: dict[str, Any] = {"direction": direction, "non_blocking": bool(non_blocking)}
    if direction != "d2d":
        facts["host"] = _host(host_tensor) if host_tensor is not None else "pageable"
    return facts
