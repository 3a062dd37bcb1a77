"""Which region an observation belongs to: the regions and allow scopes of the observing context.

The detectors are process-global; regions are not. Each region belongs to the context (thread or
asyncio task) that entered it, through ``contextvars``: a detector hands what it saw on the syncing
thread to :func:`deliver`, which gives it to the regions of that context only, so a region never
fails on, or swallows, another thread's sync.
"""
from __future__ import annotations

import contextvars
import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any, Callable

from .attribution import Site, current_phase

regions: contextvars.ContextVar[tuple] = contextvars.ContextVar("syncguard_regions", default=())
allows: contextvars.ContextVar[tuple] = contextvars.ContextVar("syncguard_allows", default=())
ids = itertools.count(1)


@dataclass(frozen=True)
class Observation:
    """One thing a detector saw on the syncing thread, before a region turns it into an event."""

    source: str  # the detector's name
    site: Site
    thread: str
    api: str | None = None
    kind: str | None = None
    op: str | None = None
    marker: str | None = None  # the profiler marker a hook opened around its call
    allows: tuple | None = None  # the allow scopes active when observed (deliver fills it)
    t_ns: int = 0  # perf_counter_ns when observed
    blocked_us: float | None = None
    count: int = 1  # e.g. segments one empty_cache() freed
    phase: str | None = None  # run / compile / graph_capture (deliver fills it)
    detail: Any = None  # detector-specific (the cuda detector's copy parameters)

    @classmethod
    def quick(cls, **fields) -> "Observation":
        """The same value as ``Observation(**fields)``, built without the frozen ``__init__``'s
        ``object.__setattr__`` per field (~2 us of 2.6 on the CPU): the cuda detector builds one per
        copy inside a CUPTI callback. Unknown field names raise TypeError as ``__init__`` would."""
        keys = fields.keys()
        if not (_REQUIRED <= keys <= _FIELDS):
            raise TypeError(f"Observation.quick: unknown {sorted(keys - _FIELDS)} or missing "
                            f"{sorted(_REQUIRED - keys)} field(s)")
        obs = object.__new__(cls)
        d = obs.__dict__
        d.update(_DEFAULTS)
        d.update(fields)
        return obs


_FIELDS = frozenset(f.name for f in dataclasses.fields(Observation))
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Observation)
             if f.default is not dataclasses.MISSING}
_REQUIRED = _FIELDS - _DEFAULTS.keys()


Sink = Callable[[Observation], bool]


def in_region() -> bool:
    return bool(regions.get())


def deliver(obs: Observation) -> bool:
    """Give an observation to every region of the context that made it."""
    open_regions = regions.get()
    if not open_regions:
        return False
    if obs.allows is None or obs.phase is None:
        # read here, on the observing thread, for every detector alike
        obs = dataclasses.replace(obs, allows=allows.get() if obs.allows is None else obs.allows,
                                  phase=current_phase() if obs.phase is None else obs.phase)
    for r in open_regions:
        r.observations.append(obs)
    return True
