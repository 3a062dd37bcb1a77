"""The ``cuda`` detector: CUPTI callbacks on the CUDA runtime and driver sync and copy APIs.

It sees every host wait the process makes through CUDA, whoever issues it (torch's Python API,
ATen's C++, a third-party extension), at a cost per sync or copy API call and none per kernel
launch: only the callback ids of those APIs are enabled, never a whole domain. The callback CUPTI
calls is C (``_cuptifast_c/``, an optional extension built at install) where it was built, else
Python (:mod:`syncguard.detectors.cuda.calls`); both keep the same fields by the same rules, and
the report's detector reason says which ran.

* Subscribed only while a region is open: a process-global hub, reference-counted across nested
  regions and threads, unsubscribes when the last one exits; nothing stays installed. Except
  beside a live thread: unsubscribing then crashed that thread, so the hub parks (every callback
  off) and unsubscribes at the next safe moment (see ``CuptiHub.acquire``).
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
* CUPTI allows one subscriber per process. If a ``torch.profiler`` starts while a region holds
  CUPTI, the hub hands CUPTI over (unsubscribes before the profiler initialises), keeps watching
  with sync-debug mode for the rest of the region, and says so in each open region's notes. If
  the profiler subscribed first, ``arm`` raises DetectorUnavailable and the region falls back.

This module owns the subscription and turns a region's observations into events; what each
callback records (the hot path) is :mod:`syncguard.detectors.cuda.calls`.
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
import sys
import threading

from syncguard.detectors import routing
from syncguard.attribution.frames import user_site
from syncguard.records.events import (_SYNC_FIELDS, BLOCKING_COPY_D2H, BLOCKING_COPY_H2D, IMPLICIT_FREE, PAGEABLE_COPY,
                      STREAM_SYNC, SyncEvent)
from syncguard.detectors.seam import DetectorUnavailable
from syncguard.detectors.cuda import cupti as C
from syncguard.detectors.cuda import neighbours
from syncguard.detectors.cuda.calls import (COPY, DRIVER_APIS, RUNTIME_APIS, BackwardOwners, CallPath,  # noqa: F401
                        CudaCall, callback_table, canonical)
from syncguard.detectors.cuda.hostmem import ActivityRecords, ByCorrelation, pointer_functions, pointer_kinds


class CuptiCalls:
    """How the hub talks to libcupti: subscribe and switch every callback id on, switch them off
    and unsubscribe. Through the C module, one call each way, where it can call CUPTI itself
    (a real library's entry points); else through ctypes (a fake library in the CPU tests, or
    the Python callback). Needs the hub's ``lib``, ``table``, ``handle``, ``fast``, ``_cb``,
    ``_cb_fast``, ``_c_addr`` and ``activity``."""

    def _c_entry(self) -> tuple[int, int, int] | None:
        """cuptiSubscribe's, cuptiEnableCallback's and cuptiUnsubscribe's addresses when the C
        module is configured and can call them itself, else None."""
        if self.fast is None:
            return None
        if self._c_addr is None:  # once: the entry points stay loaded
            lib = self.lib.lib
            fns = (lib.cuptiSubscribe, lib.cuptiEnableCallback, lib.cuptiUnsubscribe)
            if not all(isinstance(f, ctypes._CFuncPtr) for f in fns):
                return None
            self._c_addr = tuple(ctypes.cast(f, ctypes.c_void_p).value for f in fns)
        return self._c_addr

    def _on(self, fresh: bool) -> int:
        """Subscribe (``fresh``) and switch every id on; CUPTI's result code."""
        # (the addresses read here once known: every region's entry comes this way)
        c = self._c_addr if self.fast is not None else None
        if c is None:
            c = self._c_entry()
        if c is not None:  # one call into C, which also makes every thread's call state stale
            code, handle, _ = self.fast.on(c[0], c[1], self.handle.value or 0)
            if code == C.SUCCESS:
                self.handle.value = handle
            return code
        if fresh:
            cb = self._cb if self.fast is None else self._cb_fast
            code = self.lib.lib.cuptiSubscribe(ctypes.byref(self.handle), cb, None)
            if code != C.SUCCESS:
                return code
        try:
            if self.fast is not None:
                self.fast.new_generation()
            self._switch(1)
        except BaseException:
            if fresh:  # subscribed before it failed: given back
                self._off(unsubscribe=True)
                self.handle.value = None
            raise
        return C.SUCCESS

    def _switch(self, on: int) -> None:
        c = self._c_entry()
        if c is not None:  # one call into C for every id, not a ctypes call per id
            self.fast.switch(c[1], self.handle.value or 0, on)
            return
        enable = self.lib.lib.cuptiEnableCallback
        for domain, cbid in self.table:
            enable(on, self.handle, domain, cbid)

    def _off(self, unsubscribe: bool, switch: bool = True) -> None:
        """Every callback off (``switch``), then the subscription given back (``unsubscribe``):
        in that order, since unsubscribing with callbacks on crashed a syncing thread."""
        c = self._c_addr if self.fast is not None else None
        if c is None:
            c = self._c_entry()
        if c is not None and switch:
            self.fast.off(c[1], c[2] if unsubscribe else 0, self.handle.value or 0)
        else:
            try:
                if switch:
                    self._switch(0)
            finally:  # given back even if switching off failed
                if unsubscribe:
                    self.lib.lib.cuptiUnsubscribe(self.handle)
                if self.fast is not None:  # as the C off() does: no region kept alive there
                    self.fast.forget()
        if self.activity.on:
            self.activity.disable()


class CuptiHub(CallPath, CuptiCalls):
    """The process's CUPTI subscription, held while any cuda region is open."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.users = 0
        self.generation = 0
        self.lib: C.Cupti | None = None
        self.handle = ctypes.c_void_p()
        self.subscribed = False
        self.parked = False  # subscribed, every callback off, no region open (see acquire)
        self.parks = 0  # how often a region ended parked (the first one says so in its notes)
        self.activity = ActivityRecords()
        self.table: dict[tuple[int, int], tuple] = {}  # (domain, cbid) -> (api, role, kind, async, params)
        self.regions: list = []
        self.yielded: str | None = None  # why CUPTI was handed to a profiler mid-region
        self.errors = 0  # exceptions swallowed in callbacks (never raised into CUDA)
        self._saved_profiler: list = []
        self.backward = BackwardOwners()
        self._tls = threading.local()
        self._cb = C.CALLBACK(self._callback)  # kept alive as long as the hub: CUPTI calls it
        #: the C callback (``_cuptifast``) once configured; None: the Python one (``_cb``) runs
        self.fast = None
        self._cb_fast = None  # the C callback as a ctypes function pointer (fast_callback)
        self._c_addr = None  # see CuptiCalls._c_entry
        self._ready = False  # unavailable() said None once: acquire need not ask again
        self._profiler_wrappers: dict = {}  # torch's profiler start -> its wrapper, built once
        self.callback = "Python callback (CUPTI not loaded yet)"
        #: how pageable/pinned is decided: "pointer" (cudaPointerGetAttributes on the host pointer
        #: when the region exits, never in a callback) or "activity" (CUPTI MEMCPY records).
        #: Both agree with the profiler on the ops of tests/gpu/scenarios.py; pointer costs less
        #: (no activity buffers to flush and read).
        self.hostmem = os.environ.get("SYNCGUARD_CUDA_HOSTMEM", "pointer")
        if self.hostmem not in ("pointer", "activity"):
            raise ValueError(f"SYNCGUARD_CUDA_HOSTMEM must be 'pointer' or 'activity', got {self.hostmem!r}")

    # -- availability and the callback table ----------------------------------------------------
    def unavailable(self) -> str | None:
        torch = sys.modules.get("torch")
        if torch is None:
            return "torch is not imported"
        if not getattr(torch.version, "cuda", None):
            return f"torch {torch.__version__} is not a CUDA build"
        try:
            self._load()
        except C.CuptiError as e:
            return str(e)
        if not self.table:
            return f"{self.lib.path}: no sync or copy callback id resolved"
        self._ready = True
        return None

    def _load(self) -> None:
        if self.lib is None:
            lib = C.load()
            self.table, self.lib = callback_table(lib), lib
            self.use_fast()

    def use_fast(self) -> None:
        """Give CUPTI the C callback when it was built and not turned off, else say why not."""
        self.fast, self.callback = fast_callback(self)

    # -- subscription ------------------------------------------------------------------------
    # States: unsubscribed; subscribed with callbacks on (a region is open); parked (subscribed,
    # every callback off, no region open). Unsubscribing while another thread is inside a CUDA
    # call crashed that thread (SIGSEGV), even with the callbacks disabled first, while toggling
    # the callbacks of a kept subscription never did. So the last region out unsubscribes only
    # when no other Python thread is alive; otherwise it parks, and a later moment finishes the
    # job: the next region to end with no other thread alive, or a profiler starting
    # (:meth:`hand_over`).
    def acquire(self, region) -> None:
        with self.lock:
            # once available, always: torch stays imported, the library and its table stay loaded
            why = None if self._ready else self.unavailable()
            if why:
                raise DetectorUnavailable(why)
            if self.yielded:
                raise DetectorUnavailable(self.yielded)
            if self.users == 0:
                self._subscribe()
            self.users += 1
            self.regions.append(region)

    def _subscribe(self) -> None:
        fresh = not self.subscribed
        self.generation += 1  # per-thread call depth from before a park is stale
        if self.fast is not None:  # activity records are per copy: no run of copies folded then
            self.fast.folding(self.hostmem == "pointer")
        try:
            code = self._on(fresh)
        except BaseException as e:
            raise DetectorUnavailable(str(e)) from None
        if code != C.SUCCESS:
            raise DetectorUnavailable(neighbours.refused(self.lib.error_name(code)))
        self.subscribed, self.parked = True, False
        try:
            if fresh:
                self._saved_profiler = wrap_profiler_start(self.hand_over, self._profiler_wrappers)
            if self.hostmem == "activity":
                self.activity.enable(self.lib)
            self.backward.install()
        except BaseException as e:
            self._unsubscribe()
            raise DetectorUnavailable(str(e)) from None

    def _park(self) -> None:
        self.backward.restore()
        self._off(unsubscribe=False)
        self.parked = True

    def _unsubscribe(self) -> None:
        unwrap(self._saved_profiler)
        self.backward.restore()
        if self.subscribed:
            on = not self.parked  # parked: every callback is off already
            self.subscribed = self.parked = False
            self._off(unsubscribe=True, switch=on)
            self.handle.value = None

    def flush(self) -> None:
        with self.lock:
            if self.subscribed:
                self.activity.flush()

    def release(self, region) -> None:
        with self.lock:
            if region not in self.regions:
                return
            self.regions.remove(region)
            self.users -= 1
            if self.users == 0:
                try:
                    # Python threads alive besides this one (native threads are not seen)
                    others = threading.active_count() - 1
                    if others and not self.yielded:
                        self._park()
                        if self.parks == 0:  # once per process: it is the process's state
                            region.report.notes.append(
                                f"cuda detector: {others} other thread(s) alive, so CUPTI stays "
                                "subscribed with every callback off until a region ends with none "
                                "alive or a profiler starts (unsubscribing beside a syncing thread "
                                "crashed it)")
                        self.parks += 1
                    else:
                        self._unsubscribe()
                finally:
                    if self.yielded:
                        from syncguard.detectors.hooks import HUBS
                        HUBS.debug.disarm()
                    self.yielded = None
                    self.activity.records.clear()
                    self.backward.ambiguous = 0

    # -- a profiler wants CUPTI ---------------------------------------------------------------
    def hand_over(self, site) -> None:
        """Give CUPTI to a starting profiler; watch with sync-debug mode until the regions end."""
        with self.lock:
            if not self.subscribed:
                return
            if not self.regions:  # parked: every callback is long off, nothing to hand over
                self._unsubscribe()
                return
            self.flush()
            for r in self.regions:
                r.state.setdefault("cuda_records", {}).update(self.activity.records)
            self._unsubscribe()
            where = f"{site.filename}:{site.lineno}" if site.filename else "an unknown line"
            self.yielded = (f"torch.profiler started at {where} inside a region and took CUPTI "
                            "(one subscriber per process)")
            from syncguard.detectors.hooks import HUBS
            HUBS.debug.arm(routing.deliver)
            for r in self.regions:
                r.report.notes.append(f"{self.yielded}; from then on only stream syncs flagged by "
                                      "sync-debug mode were seen (detector 'debug')")
                r.state["cuda_yielded"] = True

def wrap_profiler_start(hand_over, wrappers: dict | None = None) -> list:
    """Call ``hand_over(site)`` just before torch's profiler initialises (and subscribes CUPTI);
    returns what to restore. Installed only while subscribed. ``wrappers``: torch's function ->
    its wrapper, kept by the caller so that a region's entry builds none."""
    # the module as torch imported it (a region's entry runs this, and an import statement is
    # not free with caches cold); imported here only if torch has not yet
    ap = sys.modules.get("torch.autograd.profiler")
    if ap is None:
        try:
            import torch.autograd.profiler as ap
        except ImportError:
            return []
    saved = []
    for attr in ("_prepare_profiler", "_enable_profiler"):
        original = getattr(ap, attr, None)
        if original is None:
            continue
        start_profiler = wrappers.get(original) if wrappers is not None else None
        if start_profiler is None:
            def start_profiler(*args, _original=original, **kwargs):
                hand_over(user_site())
                return _original(*args, **kwargs)

            start_profiler.__wrapped__ = original
            if wrappers is not None:
                wrappers[original] = start_profiler
        saved.append((ap, attr, original))
        setattr(ap, attr, start_profiler)
    return saved


def unwrap(saved: list) -> None:
    for owner, attr, original in reversed(saved):
        setattr(owner, attr, original)
    saved.clear()


def fast_callback(hub: CuptiHub):
    """(the configured ``_cuptifast`` module, "C callback"), or (None, why the Python one runs)."""
    if os.environ.get("SYNCGUARD_CUDA_CALLBACK", "c") == "python":
        return None, "Python callback (SYNCGUARD_CUDA_CALLBACK=python)"
    try:
        from syncguard.detectors.cuda import _cuptifast
    except ImportError as e:
        return None, f"Python callback (the C one is not built: {e})"
    from syncguard.attribution import frames as attribution
    from syncguard.detectors.cuda.calls import _NO_SITE, CudaCall, c_table

    _cuptifast.configure(
        table=c_table(hub.table), regions=routing.regions, allows=routing.allows,
        backward_active=hub.backward.active, py_callback=hub._callback,
        # torch's own per-thread getter when torch._guards is imported (one call, no wrapper)
        compiling=attribution._compile_context_getter() or attribution.compiling,
        code_cache=attribution._code_cache,
        code_class=attribution._code_class, site_cache=attribution.c_site_cache,
        make_site=attribution.site_from_frames, thread_name=_thread_name, call_type=CudaCall,
        no_site=_NO_SITE, stack_depth=attribution.STACK_DEPTH,
        compile_tls=attribution.compile_context_tls(),
        # what BackwardOwners.owner() reads to tell an engine thread from one the program started
        thread_active=getattr(threading, "_active", None),
        dummy_thread=getattr(threading, "_DummyThread", None))
    hub._cb_fast = C.CALLBACK(_cuptifast.callback_address())
    routing.scopes_changed = _cuptifast.scopes_changed  # what its GIL-free repeats check
    return _cuptifast, "C callback"


def _thread_name() -> str:
    return threading.current_thread().name


HUB = CuptiHub()


class Cuda:
    """Detector ``cuda``: see the module docstring."""

    name, order, lasting = "cuda", 5, False

    def __init__(self, hub: CuptiHub = HUB) -> None:
        self.hub = hub

    def unavailable(self) -> str | None:
        # another CUPTI tool (nsys, compute-sanitizer...) in the process: CUPTI is left to it
        return neighbours.present() or self.hub.unavailable()

    @property
    def callback(self) -> str:
        """Which callback CUPTI calls: "C callback", or "Python callback (why)"."""
        return self.hub.callback

    def arm(self, region) -> None:
        if neighbours.present():  # asked for by name, still never beside another CUPTI tool
            raise DetectorUnavailable(neighbours.present())
        self.hub.acquire(region)

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
        errors = hub.errors + activity.errors + (hub.fast.errors() if hub.fast is not None else 0)
        if errors:
            region.report.notes.append(f"cuda detector: {errors} callback error(s) swallowed")
        hub.release(region)

    def finish(self, region, found: list) -> list:
        if not region.observations:  # a region with no call kept (a sync-free test): nothing to judge
            return found
        if self.hub.hostmem == "pointer":
            events, notes = combine_by_pointer(region.observations, self.hub.fast)
        else:
            events, notes = combine(region.observations,
                                    ByCorrelation(region.state.get("cuda_records", {})), self.hub.fast)
        if notes:
            region.report.notes.extend(notes)
        if region.state.get("cuda_yielded") and "debug" not in region.report.detectors:
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
