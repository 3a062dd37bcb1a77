"""The GPU tests: they run on the GPU machine (tools/gpu_suite.sh); without CUDA each is skipped."""
from __future__ import annotations

import pytest


def cuda_available() -> bool:
    """torch is importable and has a usable CUDA device."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def skip_module_without_cuda() -> None:
    """Skip the calling test module at import when there is no CUDA device."""
    if not cuda_available():
        pytest.skip("needs CUDA", allow_module_level=True)
