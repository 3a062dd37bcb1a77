"""Hypothesis profiles for the cases, chosen by ``HYPOTHESIS_PROFILE`` (default ``ci``).

* ``ci``: few examples, so the CPU suite stays well under a minute on 2 cores;
* ``gpu``: more, for the GPU machine where the audits are the point (each audited example
  starts the profiler, so "more" is bounded by the 10-minute run limit);
* ``dev``: in between, for local work.

No deadline anywhere: the first CUDA call of an example, a Triton compile or a profiler start
can take far longer than the per-example default without anything being wrong.
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

settings.register_profile("ci", max_examples=12, **_COMMON)
settings.register_profile("dev", max_examples=25, **_COMMON)
settings.register_profile("gpu", max_examples=30, **_COMMON)

_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
if _PROFILE not in ("ci", "dev", "gpu"):
    raise ValueError(f"HYPOTHESIS_PROFILE={_PROFILE!r}: choose ci, dev or gpu")
settings.load_profile(_PROFILE)
