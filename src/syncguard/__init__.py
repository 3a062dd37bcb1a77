"""syncguard: find, attribute and gate host↔device syncs in PyTorch code.

The public names are loaded on first use (PEP 562): ``import syncguard`` is what the pytest plugin
and the CLI pay for on every start, and the regions behind ``audit()`` import torch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

#: the one place the version is written: the build reads this line statically (pyproject.toml
#: [tool.setuptools.dynamic]) and ``syncguard --version`` prints it. Keep it a plain string literal.
__version__ = "0.2.0"

__all__ = ["audit", "forbid", "allow", "RegionReport", "Report", "SyncEvent", "RaceEvent", "SyncError",
           "SchemaError", "__version__"]

#: each lazily loaded public name -> the module that defines it
_LAZY = {
    "audit": "syncguard.regions.region",
    "forbid": "syncguard.regions.region",
    "allow": "syncguard.regions.region",
    "RegionReport": "syncguard.records.events",
    "Report": "syncguard.records.events",
    "SyncEvent": "syncguard.records.events",
    "RaceEvent": "syncguard.records.events",
    "SyncError": "syncguard.records.events",
    "SchemaError": "syncguard.records.events",
}

if TYPE_CHECKING:
    from syncguard.records.events import RaceEvent, RegionReport, Report, SchemaError, SyncError, SyncEvent
    from syncguard.regions.region import allow, audit, forbid


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:  # a submodule (``from syncguard import cli``) is then imported as usual
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups do not come back here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
