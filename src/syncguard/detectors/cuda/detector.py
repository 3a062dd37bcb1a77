"""The ``cuda`` detector: CUPTI callbacks on the CUDA runtime and driver sync and copy APIs.

It sees every host wait the process makes through CUDA, whoever issues it (torch's Python API,
ATen's C++, a third-party extension), at a cost per sync or copy API call and none per kernel
launch: only the callback ids of those APIs are enabled, never a whole domain. The callback CUPTI
calls is C (``_cuptifast_c/``, an optional extension built at install) where it was built, else
Python (:mod:`syncguard.detectors.cuda.calls`); both keep the same fields by the same rules, and
the report's detector reason says which ran.

* Subscribed once, at the first region, and kept (:mod:`syncguard.detectors.cuda.hub`): a region
  is an entry in a routing table keyed by thread, so entering and leaving one costs no CUPTI
  call, and a callback on a thread with no region returns at once (in C without the GIL).
* A runtime call and the driver calls under it are one event: a per-thread depth from
  ``API_ENTER``/``API_EXIT`` keeps only the outermost call (driver calls made directly, by an
  extension, are outermost themselves).
* Copy direction comes from the call's own parameters (``cudaMemcpyAsync_v3020_params``).
  Pageable or pinned matters only for an async copy that no stream sync follows; it is asked of
  the runtime (``cudaPointerGetAttributes`` on the host pointer) when the region exits, on the
  region's thread, skipped while that thread's stream captures a graph. The alternative, CUPTI's
  MEMCPY activity records (``SYNCGUARD_CUDA_HOSTMEM=activity``), agreed on every op measured
  and cost more (its flush at region exit). The callback itself never calls CUDA: a CUDA call
  there hung the process (NOTES), and during stream capture most are illegal. The C callback
  also holds the garbage collector off while it has the GIL, since a collection could free a
  tensor whose release calls CUDA; the Python one cannot (ctypes allocates before it runs).
* The C callback keeps fewer objects than calls where combine's rules allow it: a stream sync
  that completes the copy right before it rides on that copy's Call, a run of such pairs from one
  line folds into one Call, and a run of like async copies (one loop line, one host block) folds
  into one Call; the exit judges each as the call it was, so the events are those of the Python
  callback's calls (a loop of copy-and-sync or of sync-free copies from one line: one Call).
  Such a call, made from where the thread's last one was with no region, allow, context or
  other observation changed since, is kept without the GIL at all (``_cuptifast_c/pairing.c``,
  repeat()).
* The thread, the user's line and the phase come from the callback's own thread (it runs on the
  syncing thread, before the call); region routing uses the same contextvars as every detector, so
  a call on a thread with no region costs one contextvar read.
* CUPTI allows one subscriber per process (before CUPTI 13.2). A ``torch.profiler`` starting is
  lent CUPTI (the hub drains its callbacks and unsubscribes first); regions open then keep
  watching with sync-debug mode and say so in their notes, and CUPTI is taken back at the
  profiler's stop where the profiler let it go; until then a region runs without this detector
  and its report says why (:attr:`Cuda.weaker`).

This module turns a region's observations into events; the subscription, the routing and the
hand-over are :mod:`syncguard.detectors.cuda.hub`'s; what each callback records (the hot path)
is :mod:`syncguard.detectors.cuda.calls`.
"""
from __future__ import annotations

import dataclasses

from syncguard.records.events import (_SYNC_FIELDS, BLOCKING_COPY_D2H, BLOCKING_COPY_H2D, IMPLICIT_FREE, PAGEABLE_COPY,
                      STREAM_SYNC, SyncEvent)
from syncguard.detectors.cuda.calls import (COPY, DRIVER_APIS, RUNTIME_APIS, CudaCall,  # noqa: F401
                        canonical)
from syncguard.detectors.cuda import neighbours
from syncguard.detectors.routing import threads as _threads
from syncguard.detectors.cuda.hostmem import ByCorrelation, pointer_functions, pointer_kinds
from syncguard.detectors.seam import DetectorUnavailable
from syncguard.detectors.cuda.hub import HUB, CuptiHub, fast_callback  # noqa: F401
from syncguard.detectors.cuda.lending import unwrap, wrap_profiler  # noqa: F401


class Cuda:
    """Detector ``cuda``: see the module docstring."""

    name, order, lasting = "cuda", 5, False

    def __init__(self, hub: CuptiHub = HUB) -> None:
        self.hub = hub

    def unavailable(self) -> str | None:
        # another CUPTI tool (nsys, compute-sanitizer...) in the process: CUPTI is left to it.
        # Once available, always (torch stays imported, the library and its table loaded): every
        # region's resolve asks, so the hub is not asked again then.
        return neighbours.present() or (None if self.hub._ready else self.hub.unavailable())

    @property
    def callback(self) -> str:
        """Which callback CUPTI calls: "C callback", or "Python callback (why)"."""
        return self.hub.callback

    @property
    def weaker(self) -> str | None:
        """None, or why a region entered now runs without this detector (CUPTI lent out)."""
        return self.hub.weaker

    def arm(self, region) -> None:
        if neighbours.present():  # asked for by name, still never beside another CUPTI tool
            raise DetectorUnavailable(neighbours.present())
        self.hub.acquire(region)

    def arm_alone(self, region) -> bool:
        """:meth:`arm` fused with the region's entry into its context's scopes, for a region of
        this detector alone (``registry.CUDA_ALONE``), in one call into the C module
        (``_cuptifast_c/regions.c``): True when armed and scoped; False, nothing changed, where
        the C callback is not the one subscribed, the hub is not in its steady state or another
        CUPTI tool is present, and the region arms through the seam instead."""
        hub = self.hub
        fast = hub.fast
        return fast is not None and not neighbours.present() and fast.enter_alone(hub, region, _threads)

    def disarm_alone(self, region) -> bool:
        """:meth:`disarm` fused with the region's exit from its context's scopes, for a region
        :meth:`arm_alone` armed: True when done; False, nothing changed, where the hub left its
        steady state meanwhile or the report has something to note, and the region leaves
        through the seam instead."""
        hub = self.hub
        fast = hub.fast
        return fast is not None and fast.leave_alone(hub, region, _threads)

    def disarm(self, region) -> None:
        hub = self.hub
        activity = hub.activity
        if activity.on:  # activity records (SYNCGUARD_CUDA_HOSTMEM=activity) only
            hub.flush()
        if activity.records:  # a copy of what this region may need, before release clears
            region.state.setdefault("cuda_records", {}).update(activity.records)
        if hub.backward.ambiguous:
            region.report.notes.append(
                f"cuda detector: {hub.backward.ambiguous} call(s) on autograd threads while "
                "several backward passes ran at once were not attributed")
        fast = hub.fast
        errors = hub.errors + activity.errors + (fast.errors() if fast is not None else 0)
        if errors:
            region.report.notes.append(f"cuda detector: {errors} callback error(s) swallowed")
        hub.release(region)

    def finish(self, region, found: list) -> list:
        obs = region.observations
        if not obs:  # a region with no call kept (a sync-free test): nothing to judge
            return found
        cut = region.state.get("cuda_yielded")
        if cut is not None:  # CUPTI lent out: its calls from then on are sync-debug mode's
            obs = obs[:cut] + [o for o in obs[cut:] if o.source != "cuda"]
        if self.hub.hostmem == "pointer":
            events, notes = combine_by_pointer(obs, self.hub.fast)
        else:
            events, notes = combine(obs, ByCorrelation(region.state.get("cuda_records", {})),
                                    self.hub.fast)
        if notes:
            region.report.notes.extend(notes)
        if cut is not None and "debug" not in region.report.detectors:
            obs_debug = [o for o in region.observations if o.source == "debug"]
            events += [(_event(o, o.api or "cudaStreamSynchronize", STREAM_SYNC, ("debug",)),
                        o.allows, None) for o in obs_debug]
        return found + events


def _event(o, api, kind, detectors=("cuda",), blocked=None) -> SyncEvent:
    return SyncEvent.at(o.site, api, kind, o.thread, o.blocked_us if blocked is None else blocked,
                        detectors, o.phase)


def combine_by_pointer(obs, fast=None) -> tuple[list, list[str]]:
    """:func:`combine` with host memory asked of the runtime by pointer. With the C module
    (``fast``) in one C call (``_cuptifast.by_pointer``): the pinned copies that can make no event
    are passed over first (a loop of sync-free copies leaves one per iteration, each costly for
    combine's Python loop to pass over at region exit), their pointers asked in one question,
    and the rest combined by combine's rules with the pointers asked in C, as
    :class:`~.hostmem.ByPointer` asks them (through Python, that question is a large part of a
    region's exit with caches cold)."""
    if fast is not None:
        got = fast.by_pointer(obs, pointer_functions, SyncEvent, _SYNC_FIELDS, ("cuda",), _C_KINDS)
        if got is not NotImplemented:
            events, unknown, undirected = got
            return events, (_notes(unknown, undirected) if unknown or undirected else [])
    # the Python callback's calls (by_pointer's NotImplemented, which combine's C loop would give
    # too): the Python loop
    return combine(obs, pointer_kinds(fast))


#: the kinds ``_cuptifast.combine`` and ``by_pointer`` name events with, in its order
_C_KINDS = (BLOCKING_COPY_H2D, BLOCKING_COPY_D2H, PAGEABLE_COPY, STREAM_SYNC, IMPLICIT_FREE)


def combine(obs, memory, fast=None) -> tuple[list, list[str]]:
    """Turn one region's cuda observations (in call order) into events; other detectors'
    observations in ``obs`` are passed over (one pass: each is touched once, at exit, with
    caches cold). With the C module (``fast``) its ``combine`` runs this loop by the same rules
    when every call is one the C callback made (a loop of copy-and-sync leaves one event per
    iteration, each slower to build in Python); otherwise, and without the module, the loop
    below.

    A copy and the stream sync that follows it from the same line on the same stream are one
    blocking copy (the C callback joins the two already where the sync comes from the same stack:
    the copy's Call then carries the sync, ``paired_api``; and it folds a run of like copies into
    one Call, ``folded_blocked_us``, each judged here as the copy it was); an async copy with
    nothing after it waits only if its host memory is pageable
    (CUDA stages pageable memory synchronously); device-to-device copies never make the host wait.
    ``memory`` (:mod:`.hostmem`'s ``ByPointer`` or ``ByCorrelation``) says a copy's host memory,
    and the direction of a copy whose call does not.
    """
    if fast is not None:
        got = fast.combine(obs, memory.host_kind, memory.direction, SyncEvent, _SYNC_FIELDS,
                           ("cuda",), _C_KINDS)
        if got is not NotImplemented:
            events, unknown, undirected = got
            return events, _notes(unknown, undirected)
    events: list = []
    unknown = undirected = 0
    host_kind = memory.host_kind
    pending = None  # an async host<->device copy that a stream sync may complete
    pending_dir = None

    def unpaired(c, direction, folded=None) -> int:
        """An async copy no stream sync completed: it waited only if its memory is pageable.
        1 when nothing says which. ``folded``: the durations of the copies folded into ``c``
        (_cuptifast's fold_into), judged so instead of ``c`` itself, one each."""
        host = host_kind(c, direction)
        for blocked in (c.blocked_us,) if folded is None else folded:
            if host == "pageable":
                events.append((_event(c, c.api, PAGEABLE_COPY, blocked=blocked), c.allows, None))
        return (host is None) * (1 if folded is None else len(folded))

    def blocking(o, api, direction, sync_us, copy_us) -> None:
        """The blocking copy of an async copy and the stream sync that completed it, as the
        event of ``o`` named ``api``: both durations in tenths of a microsecond, summed as
        integers (cheaper than round(x, 1))."""
        kind = BLOCKING_COPY_H2D if direction == "h2d" else BLOCKING_COPY_D2H
        blocked = (round((sync_us or 0) * 10) + round((copy_us or 0) * 10)) / 10
        events.append((_event(o, api, kind, blocked=blocked), o.allows, None))

    for o in obs:
        if o.source != "cuda":
            continue
        if o.role == COPY:
            if pending is not None:
                # the usual case, copy after pinned copy (a loop's), without a nested call
                if host_kind(pending, pending_dir) != "pinned":
                    unknown += unpaired(pending, pending_dir)
                pending = None
            direction = o.direction or memory.direction(o)
            if direction is None:
                undirected += 1
            elif direction == "h2d" or direction == "d2h":
                # the C callback's Call only: earlier pairs like it (each a copy and the stream
                # sync that completed it), folded into it, each judged as such a pair
                for api, copy_us, sync_us in getattr(o, "folded_pairs", ()):
                    blocking(o, api, direction, sync_us, copy_us)
                folded = getattr(o, "folded_blocked_us", None)  # the C callback's Call only
                if folded:  # copies like it right before it, folded into it: each unpaired
                    unknown += unpaired(o, direction, folded)
                paired = getattr(o, "paired_api", None)  # the C callback's Call only
                if o.is_async and paired is not None:
                    # the stream sync that completed it rides on it (_cuptifast's pair_with)
                    blocking(o, paired, direction, o.paired_blocked_us, o.blocked_us)
                elif o.is_async:
                    pending, pending_dir = o, direction
                else:
                    kind = BLOCKING_COPY_H2D if direction == "h2d" else BLOCKING_COPY_D2H
                    events.append((_event(o, o.api, kind), o.allows, None))
            continue  # d2d, h2h, p2p: the host does not wait for these
        if pending is not None:
            c, pending = pending, None
            if o.kind == STREAM_SYNC and (not c.stream or not o.stream or c.stream == o.stream) and (
                    c.site is o.site or (c.site.filename == o.site.filename
                                         and c.site.lineno == o.site.lineno)) and (
                    c.thread == o.thread):
                blocking(o, o.api, pending_dir, o.blocked_us, c.blocked_us)
                continue
            unknown += unpaired(c, pending_dir)
        if o.kind == IMPLICIT_FREE and events:
            prev, allows, _ = events[-1]
            if (prev.kind == IMPLICIT_FREE and prev.filename == o.site.filename
                    and prev.lineno == o.site.lineno and allows == o.allows):
                # one empty_cache() frees several segments: one wait, reported once
                events[-1] = (dataclasses.replace(prev, host_blocked_us=round(
                    (prev.host_blocked_us or 0) + (o.blocked_us or 0), 1)), allows, None)
                continue
        events.append((_event(o, o.api, o.kind), o.allows, None))
    if pending is not None:
        unknown += unpaired(pending, pending_dir)
    return events, _notes(unknown, undirected)


def _notes(unknown: int, undirected: int) -> list[str]:
    notes = []
    if unknown:
        notes.append(f"cuda detector: {unknown} async host<->device copy(ies) had no CUPTI memcpy "
                     "record, so pageable or pinned is unknown; not reported as syncs")
    if undirected:
        notes.append(f"cuda detector: {undirected} copy(ies) whose direction neither the call "
                     "(cudaMemcpyDefault, the driver's cuMemcpy) nor a record or pointer query "
                     "said; not judged")
    return notes
