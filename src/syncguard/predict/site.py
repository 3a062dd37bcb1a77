"""The one place the predictor gets user-line attribution from: the shared attribution module,
so a predicted event names the same line a measured one would."""
from __future__ import annotations

from syncguard.attribution.frames import Site, user_site

__all__ = ["Site", "user_site"]
