"""The CUDA devices a prediction models: how many, which ordinals are valid, and which device
an argument or a call's stand-ins name."""
from __future__ import annotations

import torch

from syncguard.predict.tensors import is_standin

__all__ = ["DEVICE_COUNT", "invalid_ordinal", "check_ordinal", "cuda_index"]

#: how many CUDA devices the prediction models (torch.cuda.device_count() inside a block)
DEVICE_COUNT = 1


def invalid_ordinal(index: int) -> RuntimeError:
    """What torch raises on a machine with DEVICE_COUNT GPUs when ``cuda:<index>`` is used
    (``torch.AcceleratorError``, "CUDA error: invalid device ordinal", then "GPU device may be
    out of range, do you have enough GPUs?"), in one line."""
    error = getattr(torch, "AcceleratorError", RuntimeError)
    return error(f"CUDA error: invalid device ordinal: GPU device may be out of range, do you "
                 f"have enough GPUs? (cuda:{index}; the prediction is for {DEVICE_COUNT} CUDA "
                 f"device, torch.cuda.device_count() == {DEVICE_COUNT})")


def check_ordinal(index: int | None) -> int | None:
    """``index`` when it names a device the prediction has (None and negatives pass: torch
    treats them as "no device" or rejects them itself); else raise as torch does on a GPU."""
    if index is not None and index >= DEVICE_COUNT:
        raise invalid_ordinal(index)
    return index


def cuda_index(device) -> int | None:
    """The CUDA index ``device`` names, or None when it is not a CUDA device."""
    if device is None:
        return None
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    try:
        d = torch.device(device)
    except (TypeError, RuntimeError):
        return None
    return (d.index or 0) if d.type == "cuda" else None


def _first_index(args, kwargs) -> int:
    for a in list(args) + list(kwargs.values()):
        if is_standin(a):
            return a._sg_index
        if isinstance(a, (list, tuple)):
            for x in a:
                if is_standin(x):
                    return x._sg_index
    return 0
