"""syncguard: find, attribute and gate host↔device syncs in PyTorch code."""
from __future__ import annotations

__version__ = "0.1.0"

from syncguard.records.events import RaceEvent, RegionReport, Report, SchemaError, SyncError, SyncEvent  # noqa: E402
from syncguard.regions.region import allow, audit, forbid  # noqa: E402

__all__ = ["audit", "forbid", "allow", "RegionReport", "Report", "SyncEvent", "RaceEvent", "SyncError",
           "SchemaError", "__version__"]
