"""The one place the predictor gets user-line attribution from.

The detector helper is moving ``user_site`` out of detect.py into a shared module; when that
lands, repoint this import and nothing else in syncguard.predict changes.
"""
from __future__ import annotations

from ..detect import Site, user_site

__all__ = ["Site", "user_site"]
