"""Hypothesis profiles for the whole suite (tests/ and cases/), registered once, here at the root
so that ``pytest tests/``, ``pytest cases/`` and ``pytest`` all load the same one.

* ``ci``: derandomized (examples are a function of the test, no example database), so a CI run's
  outcome is the same on every run of the same tree. Loaded when ``CI`` is set to a true value
  (``.ci/run`` sets ``CI=true``, as most CI services do).
* ``dev`` (the default elsewhere): random, so that local runs keep exploring new examples.
* ``gpu``: random and more examples, for the GPU machine where the audits are the point (each
  audited example starts the profiler, so "more" is bounded by the 10-minute run limit).

``HYPOTHESIS_PROFILE`` names one explicitly. No deadline anywhere: the first CUDA call of an
example, a Triton compile or a profiler start can take far longer than the per-example default
without anything being wrong. The profile in force and its example count go into every session
report's provenance (``syncguard.pytest_plugin.session``).
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Each from hypothesis' own defaults, never from whichever profile happens to be loaded.
_BASE = settings.get_profile("default")
settings.register_profile("ci", _BASE, max_examples=12, derandomize=True, database=None, **_COMMON)
settings.register_profile("dev", _BASE, max_examples=12, **_COMMON)
settings.register_profile("gpu", _BASE, max_examples=30, **_COMMON)

PROFILES = ("ci", "dev", "gpu")


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() not in ("", "0", "false", "no", "off")


def chosen_profile(environ=os.environ) -> str:
    """``HYPOTHESIS_PROFILE`` if set, else ``ci`` under CI, else ``dev``."""
    name = environ.get("HYPOTHESIS_PROFILE") or ("ci" if _truthy(environ.get("CI")) else "dev")
    if name not in PROFILES:
        raise ValueError(f"HYPOTHESIS_PROFILE={name!r}: choose {', '.join(PROFILES)}")
    return name


settings.load_profile(chosen_profile())
