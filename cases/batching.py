"""Batching per-item multimodal fields (pixel values, embeddings, grid sizes) for a model.

The CUDA path stages each field in pinned memory and copies it with ``non_blocking=True``, so
the host never waits for the transfer. The CPU path must do neither: pinning needs CUDA (a
CPU-only build raises) and buys nothing when the consumer is the CPU. ``batch_fields`` gets this
right; ``batch_fields_always_pinned`` is the common bug, kept as the example the CPU-path audit
(``syncguard.cpupath``) flags.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

__all__ = ["batch_fields", "batch_fields_always_pinned"]


def _fields(items: Sequence[Mapping[str, torch.Tensor]], where: str) -> dict[str, list]:
    """Per field, the items' tensors, after checking they can be concatenated."""
    if not items:
        return {}
    keys = list(items[0])
    out: dict[str, list] = {k: [] for k in keys}
    for i, item in enumerate(items):
        if list(item) != keys:
            raise ValueError(f"{where}: items[{i}] has fields {sorted(item)}; items[0] has "
                             f"{sorted(keys)}")
        for k in keys:
            t = item[k]
            if not isinstance(t, torch.Tensor) or t.dim() == 0:
                raise ValueError(f"{where}: items[{i}][{k!r}] must be a tensor with a leading "
                                 f"item dimension, got {getattr(t, 'shape', type(t).__name__)}")
            first = out[k][0] if out[k] else t
            if t.device.type != "cpu":
                raise ValueError(f"{where}: items[{i}][{k!r}] is on {t.device}; items arrive "
                                 "on the CPU")
            if t.dtype != first.dtype or t.shape[1:] != first.shape[1:]:
                raise ValueError(f"{where}: items[{i}][{k!r}] is {t.dtype} {tuple(t.shape)}, "
                                 f"items[0] is {first.dtype} {tuple(first.shape)}")
            out[k].append(t)
    return out


def batch_fields(items: Sequence[Mapping[str, torch.Tensor]],
                 device: Any) -> dict[str, torch.Tensor]:
    """Concatenate each field over ``items`` along dim 0 and place it on ``device``.

    CUDA: concatenate straight into a pinned buffer, then one non-blocking copy per field (the
    caching host allocator keeps the buffer alive until the copy has read it). CPU: a plain
    ``torch.cat``; nothing is pinned, no CUDA API is touched.
    """
    device = torch.device(device)
    batch = {}
    for key, parts in _fields(items, "batch_fields").items():
        shape, dtype = (sum(p.shape[0] for p in parts), *parts[0].shape[1:]), parts[0].dtype
        if device.type == "cuda":
            staging = torch.empty(shape, dtype=dtype, pin_memory=True)  # CUDA path only
            torch.cat(parts, out=staging)
            batch[key] = staging.to(device, non_blocking=True)
        else:
            batch[key] = torch.cat(parts).to(device)
    return batch


def batch_fields_always_pinned(items: Sequence[Mapping[str, torch.Tensor]], device: Any, *,
                               pin_memory: bool = True) -> dict[str, torch.Tensor]:
    """DELIBERATELY WRONG: pins whenever the ``pin_memory`` flag says so (a default copied from
    a DataLoader config), whatever the device. On a CPU-only build this raises; on a CUDA
    machine running the CPU path it locks host memory for nothing. Kept for the audit's tests.
    """
    device = torch.device(device)
    batch = {}
    for key, parts in _fields(items, "batch_fields_always_pinned").items():
        shape, dtype = (sum(p.shape[0] for p in parts), *parts[0].shape[1:]), parts[0].dtype
        staging = torch.empty(shape, dtype=dtype, pin_memory=pin_memory)  # the bug
        torch.cat(parts, out=staging)
        batch[key] = staging.to(device, non_blocking=True)
    return batch
