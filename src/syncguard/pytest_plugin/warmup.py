"""Warm-up before the first audited test of a process.

Why: the first CUDA call of a process pays for the context, the caching allocator, cuBLAS handles
and the pinned-memory pool, and some of that synchronises. Paid inside the first audited test, it
would be blamed on whichever test ran first. syncguard pays its own part here, then calls the
``pytest_syncguard_warmup`` hook (newhooks.py) for the user's part.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from typing import Any, Callable

import pytest

from syncguard.pytest_plugin import devices


def cuda_warmup(worker_id: str | None, detectors: tuple[str, ...]) -> None:
    """Pay lazy CUDA initialisation on this worker's device; nothing without CUDA."""
    if set(detectors) == {"fake"}:  # the fake detector needs no CUDA warm-up
        return
    # not imported by the suite: then its tests have used no CUDA to warm up, and importing torch
    # here would change the suite (sys.modules, warnings, pickle's module walk)
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return
    devices.assign(worker_id)
    a = torch.randn(64, 64, device="cuda")
    (a @ a).sum().item()
    (a.half() @ a.half()).float().sum().item()
    (a > 0).nonzero()
    torch.empty(64, pin_memory=True).to("cuda", non_blocking=True)
    torch.cuda.synchronize()


def synchronize_if_initialised() -> None:
    """Let the user's warm-up finish on the device before the first audit starts."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class IniWarmup:
    """``syncguard_warmup = module:callable`` (ini): one implementation of the warm-up hook.

    The module is found when the session starts (a misspelt name is a usage error then) and
    imported only for the first audited test: a run that audits nothing, ``--collect-only`` and
    ``--help`` do not import it (it may initialise CUDA, or need a GPU)."""

    def __init__(self, spec: str, where: str = "ini option syncguard_warmup"):
        self.spec, self.where = spec, where  # where: the ini key and file (options.where)
        module = spec.partition(":")[0].strip()
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError) as e:
            found, why = None, f"{type(e).__name__}: {e}"
        else:
            why = f"no module named {module!r}"
        if found is None:
            raise pytest.UsageError(self._says(f"cannot load {spec!r} ({why})"))

    def _says(self, what: str) -> str:
        return f"syncguard: {self.where}: {what}"

    def _load(self) -> Callable[[], Any]:
        module, _, attr = self.spec.partition(":")
        try:
            fn = functools.reduce(getattr, attr.strip().split("."),
                                  importlib.import_module(module.strip()))
        except Exception as e:
            pytest.exit(self._says(f"cannot load {self.spec!r} ({type(e).__name__}: {e})"),
                        returncode=pytest.ExitCode.USAGE_ERROR)
        if not callable(fn):
            pytest.exit(self._says(f"{self.spec!r} is not callable"),
                        returncode=pytest.ExitCode.USAGE_ERROR)
        return fn

    def pytest_syncguard_warmup(self, config: pytest.Config) -> None:
        self._load()()
