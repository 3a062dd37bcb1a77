"""The ``cuda`` detector: CUPTI callbacks on the CUDA runtime and driver sync and copy APIs.

It sees every host wait the process makes through CUDA, whoever issues it (torch's Python API,
ATen's C++, a third-party extension), at the cost of one Python call per sync or copy API call
and none per kernel launch: only the callback ids of those APIs are enabled, never a whole domain.

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
  there hung the process (NOTES), and during stream capture most are illegal.
* The thread, the user's line and the phase come from the callback's own thread (it runs on the
  syncing thread, before the call); region routing uses the same contextvars as every detector, so
  a call on a thread with no region costs one contextvar read.
* CUPTI allows one subscriber per process. If a ``torch.profiler`` starts while a region holds
  CUPTI, the hub hands CUPTI over (unsubscribes before the profiler initialises), keeps watching
  with sync-debug mode for the rest of the region, and says so in each open region's notes. If
  the profiler subscribed first, ``arm`` raises DetectorUnavailable and the region falls back.
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field

from .. import routing
from ..attribution import RUN, Site, site_and_phase, user_site
from ..events import (BLOCKING_COPY_D2H, BLOCKING_COPY_H2D, DEVICE_SYNC, EVENT_SYNC, IMPLICIT_FREE,
                      PAGEABLE_COPY, STREAM_SYNC, SyncEvent)
from . import DetectorUnavailable
from . import cupti as C
from .hostmem import ActivityRecords, copy_direction, host_kind, pointer_records

SYNC, COPY, FREE = "sync", "copy", "free"

# canonical API name (version suffixes dropped) -> (role, kind or direction, is_async, params)
_P, _P2 = C.MemcpyAsyncParams, C.Memcpy2DParams
RUNTIME_APIS = {
    "cudaStreamSynchronize": (SYNC, STREAM_SYNC, False, C.StreamParams),
    "cudaStreamSynchronize_ptsz": (SYNC, STREAM_SYNC, False, C.StreamParams),
    "cudaDeviceSynchronize": (SYNC, DEVICE_SYNC, False, None),
    "cudaThreadSynchronize": (SYNC, DEVICE_SYNC, False, None),
    "cudaEventSynchronize": (SYNC, EVENT_SYNC, False, None),
    "cudaFree": (FREE, IMPLICIT_FREE, False, None),
    "cudaMemcpy": (COPY, None, False, _P), "cudaMemcpy_ptds": (COPY, None, False, _P),
    "cudaMemcpy2D": (COPY, None, False, _P2), "cudaMemcpy2D_ptds": (COPY, None, False, _P2),
    "cudaMemcpyAsync": (COPY, None, True, _P), "cudaMemcpyAsync_ptsz": (COPY, None, True, _P),
    "cudaMemcpy2DAsync": (COPY, None, True, _P2), "cudaMemcpy2DAsync_ptsz": (COPY, None, True, _P2),
}
DRIVER_APIS = {
    "cuStreamSynchronize": (SYNC, STREAM_SYNC, False, C.StreamParams),
    "cuStreamSynchronize_ptsz": (SYNC, STREAM_SYNC, False, C.StreamParams),
    "cuCtxSynchronize": (SYNC, DEVICE_SYNC, False, None),
    "cuEventSynchronize": (SYNC, EVENT_SYNC, False, None),
    "cuMemFree": (FREE, IMPLICIT_FREE, False, None),
    "cuMemcpyHtoD": (COPY, "h2d", False, None), "cuMemcpyHtoD_ptds": (COPY, "h2d", False, None),
    "cuMemcpyDtoH": (COPY, "d2h", False, None), "cuMemcpyDtoH_ptds": (COPY, "d2h", False, None),
    "cuMemcpy": (COPY, None, False, None), "cuMemcpy_ptds": (COPY, None, False, None),
    "cuMemcpy2D": (COPY, None, False, None), "cuMemcpy2DUnaligned": (COPY, None, False, None),
    "cuMemcpyHtoDAsync": (COPY, "h2d", True, None), "cuMemcpyHtoDAsync_ptsz": (COPY, "h2d", True, None),
    "cuMemcpyDtoHAsync": (COPY, "d2h", True, None), "cuMemcpyDtoHAsync_ptsz": (COPY, "d2h", True, None),
    "cuMemcpyAsync": (COPY, None, True, None), "cuMemcpyAsync_ptsz": (COPY, None, True, None),
    "cuMemcpy2DAsync": (COPY, None, True, None), "cuMemcpy2DAsync_ptsz": (COPY, None, True, None),
}
_VERSION = re.compile(r"_v\d+")
_NO_WAIT = ("d2d", "h2h")  # copy directions the host never waits for (never reported)
_NO_SITE = Site()


def canonical(name: str) -> str:
    """``cudaMemcpyAsync_ptsz_v7000`` -> ``cudaMemcpyAsync_ptsz``; ``cuMemcpyHtoD_v2`` -> ``cuMemcpyHtoD``."""
    return _VERSION.sub("", name)


@dataclass
class CopyDetail:
    """What the callback read from the call's parameters (mutable until the call returns)."""

    role: str
    direction: str | None = None  # h2d, d2h, d2d, h2h, or None when the call does not say
    is_async: bool = False
    stream: int | None = None
    nbytes: int | None = None
    correlation: list = field(default_factory=list)  # this call's and the driver calls' under it
    src: int | None = None
    dst: int | None = None

    @property
    def host_ptr(self) -> int | None:
        return self.src if self.direction == "h2d" else self.dst if self.direction == "d2h" else None


class _Call:
    __slots__ = ("api", "role", "kind", "detail", "site", "phase", "thread", "t0", "owner")


def _read_params(spec, params_ptr, detail: CopyDetail) -> None:
    if not params_ptr:
        return
    if spec is C.StreamParams:
        detail.stream = C.StreamParams.from_address(params_ptr).stream or 0
    elif spec in (_P, _P2):
        p = spec.from_address(params_ptr)
        detail.direction = detail.direction or C.CUDA_MEMCPY_KIND.get(p.kind)
        if detail.direction == "default":
            detail.direction = None  # cudaMemcpyDefault: the activity record's copyKind says
        detail.stream = p.stream or 0
        detail.src, detail.dst = p.src, p.dst
        detail.nbytes = p.count if spec is _P else p.width * p.height


class CuptiHub:
    """The process's CUPTI subscription, held while any cuda region is open."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.users = 0
        self.generation = 0
        self.lib: C.Cupti | None = None
        self.handle = ctypes.c_void_p()
        self.subscribed = False
        self.parked = False  # subscribed, every callback off, no region open (see acquire)
        self.activity = ActivityRecords()
        self.table: dict[tuple[int, int], tuple] = {}  # (domain, cbid) -> (api, role, kind, async, params)
        self.regions: list = []
        self.yielded: str | None = None  # why CUPTI was handed to a profiler mid-region
        self.errors = 0  # exceptions swallowed in callbacks (never raised into CUDA)
        self._saved_profiler: list = []
        self.backward = BackwardOwners()
        self._tls = threading.local()
        self._cb = C.CALLBACK(self._callback)  # kept alive as long as the hub: CUPTI calls it
        #: how pageable/pinned is decided: "pointer" (cudaPointerGetAttributes on the host pointer
        #: when the region exits, never in a callback) or "activity" (CUPTI MEMCPY records).
        #: Both agreed with the profiler on every op of tests/gpu/scenarios.py on the H200; pointer
        #: cost less on all three benchmark workloads (reports/probes/run2/overhead-2.11.0.md).
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
        return None

    def _load(self) -> None:
        if self.lib is None:
            lib = C.load()
            self.table, self.lib = callback_table(lib), lib

    # -- subscription ------------------------------------------------------------------------
    # States: unsubscribed; subscribed with callbacks on (a region is open); parked (subscribed,
    # every callback off, no region open). Unsubscribing while another thread is inside a CUDA
    # call crashed that thread (SIGSEGV), even with the callbacks disabled first, while toggling
    # the callbacks of a kept subscription never did (reports/probes/cupti-threads-2.11.0/,
    # reports/gpu/2.11.0/stress-threads/). So the last region out unsubscribes only when no other
    # Python thread is alive; otherwise it parks, and a later moment finishes the job: the next
    # region to end with no other thread alive, or a profiler starting (:meth:`hand_over`).
    def acquire(self, region) -> None:
        with self.lock:
            why = self.unavailable()
            if why:
                raise DetectorUnavailable(why)
            if self.yielded:
                raise DetectorUnavailable(self.yielded)
            if self.users == 0:
                self._subscribe()
            self.users += 1
            self.regions.append(region)

    def _subscribe(self) -> None:
        lib = self.lib
        if not self.subscribed:
            code = lib.lib.cuptiSubscribe(ctypes.byref(self.handle), self._cb, None)
            if code != C.SUCCESS:
                raise DetectorUnavailable(
                    f"cuptiSubscribe failed: {lib.error_name(code)} (another CUPTI client, such as "
                    "torch.profiler earlier in this process, holds the one subscriber slot)")
            self.subscribed = True
            self._saved_profiler = wrap_profiler_start(self.hand_over)
        self.parked = False
        self.generation += 1  # per-thread call depth from before a park is stale
        try:
            self._switch(1)
            if self.hostmem == "activity":
                self.activity.enable(lib)
            self.backward.install()
        except BaseException as e:
            self._unsubscribe()
            raise DetectorUnavailable(str(e)) from None

    def _switch(self, on: int) -> None:
        for domain, cbid in self.table:
            self.lib.lib.cuptiEnableCallback(on, self.handle, domain, cbid)

    def _park(self) -> None:
        self.backward.restore()
        self._switch(0)
        self.activity.disable()
        self.parked = True

    def _unsubscribe(self) -> None:
        try:
            if self.subscribed and not self.parked:
                self._park()  # callbacks off before unsubscribing (it narrowed the crash)
        finally:
            unwrap(self._saved_profiler)
            self.backward.restore()
            if self.subscribed:
                self.subscribed = self.parked = False
                self.lib.lib.cuptiUnsubscribe(self.handle)
                self.handle = ctypes.c_void_p()

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
                    others = other_threads()
                    if others and not self.yielded:
                        self._park()
                        region.report.notes.append(
                            f"cuda detector: {others} other thread(s) alive, so CUPTI stays "
                            "subscribed with every callback off until a region ends with none "
                            "alive or a profiler starts (unsubscribing beside a syncing thread "
                            "crashed it)")
                    else:
                        self._unsubscribe()
                finally:
                    if self.yielded:
                        from ..detect import HUBS
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
            from ..detect import HUBS
            HUBS.debug.arm(routing.deliver)
            for r in self.regions:
                r.report.notes.append(f"{self.yielded}; from then on only stream syncs flagged by "
                                      "sync-debug mode were seen (detector 'debug')")
                r.state["cuda_yielded"] = True

    # -- callbacks (run on the calling thread; must never raise or call CUDA) ------------------
    def _callback(self, userdata, domain, cbid, cbdata) -> None:
        # Hot path: one ENTER and one EXIT per enabled API call of any thread while subscribed.
        # Per-thread state is one list [generation, depth, call] (one threading.local lookup).
        try:
            entry = self.table.get((domain, cbid))
            if entry is None:
                return
            data = C.CallbackData.from_address(cbdata)
            st = getattr(self._tls, "st", None)
            if st is None or st[0] != self.generation:
                st = self._tls.st = [self.generation, 0, None]
            if data.callbackSite == C.API_ENTER:
                depth = st[1]
                st[1] = depth + 1
                if depth:  # a driver call under the runtime call: the same wait, same event
                    if st[2] is not None:
                        st[2].detail.correlation.append(data.correlationId)
                    return
                st[2] = None
                owner = None
                if not routing.regions.get():
                    owner = self.backward.owner()  # an autograd engine thread working for a region?
                    if owner is None:
                        return
                st[2] = self._enter(entry, data, owner)
            else:
                depth = st[1] - 1 if st[1] > 0 else 0
                st[1] = depth
                if depth:
                    return
                call = st[2]
                if call is not None:
                    st[2] = None
                    self._exit(call)
        except BaseException:
            self.errors += 1

    def _enter(self, entry, data, owner=None) -> _Call | None:
        api, role, kind, is_async, spec = entry
        detail = CopyDetail(role, kind if role == COPY else None, is_async,
                            correlation=[data.correlationId])
        if role == FREE:
            ptr = ctypes.c_void_p.from_address(data.functionParams).value if data.functionParams else 1
            if not ptr:
                return None  # cudaFree(NULL) frees nothing: the idiom that initialises a context
        elif spec is not None:
            _read_params(spec, data.functionParams, detail)
            if detail.direction in _NO_WAIT:
                self._no_wait_copy(api, detail, owner)
                return None  # nothing to time at EXIT
        call = _Call()
        call.api, call.role, call.kind, call.detail = api, role, kind, detail
        call.site, call.phase = site_and_phase(sys._getframe(1))
        call.owner = owner
        if owner is None:
            call.thread = threading.current_thread().name
        else:  # no Python frames of the user's on a C++ autograd thread: the backward() line
            call.thread = f"autograd engine (backward of {owner[3]})"
            if call.site.filename is None:
                call.site = owner[2]
        call.t0 = time.perf_counter_ns()
        return call

    def _no_wait_copy(self, api, detail, owner) -> None:
        """A device-to-device or host-to-host copy never makes the host wait for the GPU; its only
        use in :func:`combine` is to end a pending async copy's chance to pair with a later
        sync, which needs its place in the sequence, not its line, phase or duration."""
        obs = routing.Observation.quick(source="cuda", site=_NO_SITE, thread="", api=api,
                                        phase=RUN, detail=detail, allows=())
        if owner is None:
            routing.deliver(obs)
        else:
            for r in owner[0]:
                r.observations.append(obs)

    def _exit(self, call: _Call) -> None:
        t0 = call.t0
        blocked = round((time.perf_counter_ns() - t0) / 1000, 1)
        owner = call.owner
        obs = routing.Observation.quick(
            source="cuda", site=call.site, thread=call.thread, api=call.api,
            kind=call.kind if call.role != COPY else None, t_ns=t0, blocked_us=blocked,
            phase=call.phase, detail=call.detail,
            allows=routing.allows.get() if owner is None else owner[1])
        if owner is None:
            routing.deliver(obs)
        else:
            for r in owner[0]:
                r.observations.append(obs)


class BackwardOwners:
    """Which region a sync on an autograd engine thread belongs to.

    torch runs a CUDA backward pass on its own C++ device threads; their contextvars are empty,
    so their syncs would reach no region. While subscribed, ``Variable._execution_engine`` (the
    object every ``backward()``/``grad()`` calls ``run_backward`` on) is replaced by a transparent
    proxy that records, per calling thread, the caller's regions, allows and line. A sync on a
    thread with no region of its own goes to the one backward pass in flight; while two or more
    run at once it is not attributed (counted in ``ambiguous``). Restored when unsubscribed.
    """

    def __init__(self) -> None:
        self.active: dict[int, tuple] = {}  # caller thread id -> (regions, allows, site, name)
        self.ambiguous = 0
        self._saved = None

    def install(self) -> None:
        try:
            from torch.autograd.variable import Variable
        except ImportError:
            return
        engine = Variable.__dict__.get("_execution_engine")
        if engine is None or isinstance(engine, _EngineProxy):
            return
        self._saved = (Variable, engine)
        Variable._execution_engine = _EngineProxy(engine, self)

    def restore(self) -> None:
        if self._saved is not None:
            owner, engine = self._saved
            owner._execution_engine = engine
            self._saved = None

    def owner(self):
        active = self.active
        if not active:
            return None
        known = getattr(threading, "_active", {}).get(threading.get_ident())
        if known is not None and not isinstance(known, threading._DummyThread):
            return None  # a thread the program started itself: its syncs are its own, not backward's
        if len(active) > 1:
            self.ambiguous += 1
            return None
        (regions, allows, site, name), = active.values()
        return (regions, allows, site, name) if regions else None


class _EngineProxy:
    """Stands in for torch's ImperativeEngine: every attribute is the engine's own, except that
    ``run_backward`` notes who is waiting for it."""

    def __init__(self, engine, owners: BackwardOwners) -> None:
        object.__setattr__(self, "_engine", engine)
        object.__setattr__(self, "_owners", owners)

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def run_backward(self, *args, **kwargs):
        me = threading.get_ident()
        active = self._owners.active
        outer = active.get(me)  # a backward inside a backward (checkpointing): keep the outer one
        if outer is None:
            active[me] = (routing.regions.get(), routing.allows.get(),
                          user_site(sys._getframe(1)), threading.current_thread().name)
        try:
            return self._engine.run_backward(*args, **kwargs)
        finally:
            if outer is None:
                active.pop(me, None)


def wrap_profiler_start(hand_over) -> list:
    """Call ``hand_over(site)`` just before torch's profiler initialises (and subscribes CUPTI);
    returns what to restore. Installed only while subscribed."""
    try:
        import torch.autograd.profiler as ap
    except ImportError:
        return []
    saved = []
    for attr in ("_prepare_profiler", "_enable_profiler"):
        original = getattr(ap, attr, None)
        if original is None:
            continue

        def start_profiler(*args, _original=original, **kwargs):
            hand_over(user_site())
            return _original(*args, **kwargs)

        start_profiler.__wrapped__ = original
        saved.append((ap, attr, original))
        setattr(ap, attr, start_profiler)
    return saved


def unwrap(saved: list) -> None:
    for owner, attr, original in reversed(saved):
        setattr(owner, attr, original)
    saved.clear()


def callback_table(lib) -> dict:
    """(domain, cbid) -> (api, role, kind, is_async, params) for the APIs the detector watches,
    resolved by name with CUPTI's own table (no callback is enabled to find them)."""
    table = {}
    for domain, apis in ((C.DOMAIN_RUNTIME, RUNTIME_APIS), (C.DOMAIN_DRIVER, DRIVER_APIS)):
        names = {}
        for cbid in range(1, 2000):
            name = lib.callback_name(domain, cbid)
            if name is None:
                if cbid > 1200:
                    break
                continue
            names.setdefault(canonical(name), cbid)
        for api, spec in apis.items():
            if api in names:
                table[(domain, names[api])] = (api,) + spec
    if not any(d == C.DOMAIN_RUNTIME for d, _ in table):
        # a libcupti without callback names: the header's numbers (stable since CUDA 7)
        for full, cbid in C.RUNTIME_CBIDS.items():
            spec = RUNTIME_APIS.get(canonical(full))
            if spec:
                table[(C.DOMAIN_RUNTIME, cbid)] = (canonical(full),) + spec
    return table


def other_threads() -> int:
    """Python threads alive besides this one (native threads are not seen)."""
    return threading.active_count() - 1


HUB = CuptiHub()


class Cuda:
    """Detector ``cuda``: see the module docstring."""

    name, order, lasting = "cuda", 5, False

    def __init__(self, hub: CuptiHub = HUB) -> None:
        self.hub = hub

    def unavailable(self) -> str | None:
        return self.hub.unavailable()

    def arm(self, region) -> None:
        self.hub.acquire(region)

    def disarm(self, region) -> None:
        self.hub.flush()
        mine = region.state.setdefault("cuda_records", {})
        mine.update(self.hub.activity.records)  # a copy of what this region may need, before release clears
        if self.hub.backward.ambiguous:
            region.report.notes.append(
                f"cuda detector: {self.hub.backward.ambiguous} call(s) on autograd threads while "
                "several backward passes ran at once were not attributed")
        errors = self.hub.errors + self.hub.activity.errors
        if errors:
            region.report.notes.append(f"cuda detector: {errors} callback error(s) swallowed")
        self.hub.release(region)

    def finish(self, region, found: list) -> list:
        obs = [o for o in region.observations if o.source == "cuda"]
        records = region.state.get("cuda_records", {})
        if self.hub.hostmem == "pointer":
            records = dict(records)
            records.update(pointer_records(obs))
        events, notes = combine(obs, records)
        region.report.notes.extend(notes)
        if region.state.get("cuda_yielded") and "debug" not in region.report.detectors:
            obs_debug = [o for o in region.observations if o.source == "debug"]
            events += [(_event(o, o.api or "cudaStreamSynchronize", STREAM_SYNC, ("debug",)),
                        o.allows, None) for o in obs_debug]
        return found + events


def _event(o, api, kind, detectors=("cuda",), blocked=None, note=None) -> SyncEvent:
    return SyncEvent(api=api, kind=kind, filename=o.site.filename, lineno=o.site.lineno,
                     function=o.site.function, stack=o.site.stack, thread=o.thread,
                     host_blocked_us=o.blocked_us if blocked is None else blocked,
                     detectors=detectors, phase=o.phase, note=note)


def combine(obs, records) -> tuple[list, list[str]]:
    """Turn one region's cuda observations (in call order) into events.

    A copy and the stream sync that follows it from the same line on the same stream are one
    blocking copy; an async copy with nothing after it waits only if its host memory is pageable
    (CUDA stages pageable memory synchronously); device-to-device copies never make the host wait.
    """
    events: list = []
    notes: list[str] = []
    unknown = 0
    pending = None  # an async host<->device copy that a stream sync may complete

    def flush_pending():
        nonlocal pending, unknown
        if pending is None:
            return
        o, direction = pending
        pending = None
        host = host_kind(o.detail, direction, records)
        if host == "pageable":
            events.append((_event(o, o.api, PAGEABLE_COPY), o.allows, None))
        elif host is None:
            unknown += 1

    for o in obs:
        d: CopyDetail = o.detail
        if d.role == COPY:
            direction = copy_direction(d, records)
            flush_pending()
            if direction not in ("h2d", "d2h"):
                continue  # d2d, h2h, p2p: the host does not wait for these
            if d.is_async:
                pending = (o, direction)
            else:
                kind = BLOCKING_COPY_H2D if direction == "h2d" else BLOCKING_COPY_D2H
                events.append((_event(o, o.api, kind), o.allows, None))
            continue
        if o.kind == STREAM_SYNC and pending is not None:
            c, direction = pending
            same_stream = not c.detail.stream or not d.stream or c.detail.stream == d.stream
            same_line = (c.site.filename, c.site.lineno) == (o.site.filename, o.site.lineno)
            if same_stream and same_line and c.thread == o.thread:
                pending = None
                kind = BLOCKING_COPY_H2D if direction == "h2d" else BLOCKING_COPY_D2H
                blocked = round((o.blocked_us or 0) + (c.blocked_us or 0), 1)
                events.append((_event(o, o.api, kind, blocked=blocked), o.allows, None))
                continue
        flush_pending()
        if o.kind == IMPLICIT_FREE and events:
            prev, allows, _ = events[-1]
            if (prev.kind == IMPLICIT_FREE and prev.filename == o.site.filename
                    and prev.lineno == o.site.lineno and allows == o.allows):
                # one empty_cache() frees several segments: one wait, reported once
                events[-1] = (dataclasses.replace(prev, host_blocked_us=round(
                    (prev.host_blocked_us or 0) + (o.blocked_us or 0), 1)), allows, None)
                continue
        events.append((_event(o, o.api, o.kind), o.allows, None))
    flush_pending()
    if unknown:
        notes.append(f"cuda detector: {unknown} async host<->device copy(ies) had no CUPTI memcpy "
                     "record, so pageable or pinned is unknown; not reported as syncs")
    return events, notes
