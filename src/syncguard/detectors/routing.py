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

from syncguard.attribution.frames import Site, current_phase

regions: contextvars.ContextVar[tuple] = contextvars.ContextVar("syncguard_regions", default=())
allows: contextvars.ContextVar[tuple] = contextvars.ContextVar("syncguard_allows", default=())
ids = itertools.count(1)


def _nothing() -> None:
    return None


#: Called whenever a region or an allow is entered or left, on any thread (regions/region.py). The cuda
#: detector's C callback keeps a call that repeats the thread's last one without the GIL only
#: while nothing of the sort happened in between (detectors/cuda/_cuptifast_c/pairing.c, repeat()); the detector
#: puts its C module's counter here once the module is configured.
scopes_changed: Callable[[], None] = _nothing


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
    detail: Any = None  # detector-specific (the sync-debug hooks that saw the same sync)


Sink = Callable[[Observation], bool]

#: The cuda detector's routing table, as its Python callback reads it: thread ident -> how many
#: regions entered on that thread are open (the hub routes a region at its entry and unroutes it
#: at its exit). A CUPTI callback on a thread with no entry returns at once: CUPTI stays
#: subscribed between regions, and its callbacks come on every thread. The C callback keeps the
#: same table in C (detectors/cuda/_cuptifast_c/routing.c). Which region a call then belongs to
#: is decided as for every detector, by the regions of the calling context (:func:`deliver`).
threads: dict[int, int] = {}


def route(thread: int, delta: int) -> int:
    """The regions open on ``thread`` changed by ``delta``; how many are open there now."""
    n = threads.get(thread, 0) + delta
    if n > 0:
        threads[thread] = n
    else:
        threads.pop(thread, None)
    return max(n, 0)


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
