"""What a detector is: the protocol every detector implements, and the error ``arm`` raises.

Kept apart from the registry (``syncguard.detectors``) so that detector modules, which the
registry imports, depend on this module only and never on the registry.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


class DetectorUnavailable(RuntimeError):
    """Raised by ``arm`` when the detector cannot run now; the message is the one-line reason."""


@runtime_checkable
class Detector(Protocol):
    name: str
    order: int  # finish() runs in this order; lower first
    lasting: bool  # True: leaves a hook in the process after the last region (opt-in only)

    def unavailable(self) -> str | None:
        """Why this detector cannot run in this process now, or None."""

    def arm(self, region: Any) -> None:
        """Start observing for ``region``; raise DetectorUnavailable with a reason if it cannot."""

    def disarm(self, region: Any) -> None:
        """Stop observing for ``region``; the last region restores everything arm changed."""

    def finish(self, region: Any, found: list) -> list:
        """``found`` plus this detector's events: a list of (SyncEvent, allows, marker)."""
