"""Hooks syncguard adds to pytest (registered by plugin.py's ``pytest_addhooks``).

Implement them in a ``conftest.py`` or a plugin, as with pytest-xdist's ``newhooks``.
"""
from __future__ import annotations

import pytest


def pytest_syncguard_warmup(config: pytest.Config) -> None:
    """Run once per process before its first audited test, after syncguard's own CUDA warm-up.

    Pay lazy first-use costs here (a model's first forward, cuBLAS/cuDNN handles, compiled
    kernels) so that they do not show up as syncs in whichever test happens to run first. Every
    implementation is called; syncguard synchronises the device after them. The ini option
    ``syncguard_warmup = module:callable`` is an alias that registers one such implementation.
    """
