"""The ``cuda`` detector's hot path: what one CUPTI callback turns into.

Split from :mod:`syncguard.detectors.cuda.detector` (which owns the subscription and turns a region's
observations into events) because this part runs for every enabled API call of every thread while
subscribed: the API tables that say what a callback id means, the parameters read from the
call's own C struct, the per-thread depth that makes a runtime call and the driver calls under it
one observation, and who a call on torch's autograd engine threads belongs to. Nothing here calls
CUDA or raises into it.

This is the Python callback. Where ``_cuptifast_c/`` was built, CUPTI calls that C callback
instead, which follows the same rules and builds the same :class:`CudaCall`, and hands a call
here only for a thread with no region while a backward pass runs (the owner logic below).
Both return at once for a thread that the routing table (:data:`routing.threads`, and the C
module's own) says has no region open, unless a region's backward pass runs.
"""
from __future__ import annotations

import ctypes
import re
import sys
import threading
import time
from typing import NamedTuple

from syncguard.detectors import routing
from syncguard.attribution.frames import RUN, Site, site_and_phase, user_site
from syncguard.records.events import DEVICE_SYNC, EVENT_SYNC, IMPLICIT_FREE, STREAM_SYNC
from syncguard.detectors.cuda import cupti as C

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
_D, _DA = C.DriverCopyParams, C.DriverCopyAsyncParams
DRIVER_APIS = {
    "cuStreamSynchronize": (SYNC, STREAM_SYNC, False, C.StreamParams),
    "cuStreamSynchronize_ptsz": (SYNC, STREAM_SYNC, False, C.StreamParams),
    "cuCtxSynchronize": (SYNC, DEVICE_SYNC, False, None),
    "cuEventSynchronize": (SYNC, EVENT_SYNC, False, None),
    "cuMemFree": (FREE, IMPLICIT_FREE, False, None),
    "cuMemcpyHtoD": (COPY, "h2d", False, _D), "cuMemcpyHtoD_ptds": (COPY, "h2d", False, _D),
    "cuMemcpyDtoH": (COPY, "d2h", False, _D), "cuMemcpyDtoH_ptds": (COPY, "d2h", False, _D),
    # unified addressing: the pointers say the direction (a CUPTI record, or asked at region exit)
    "cuMemcpy": (COPY, None, False, _D), "cuMemcpy_ptds": (COPY, None, False, _D),
    "cuMemcpy2D": (COPY, None, False, None), "cuMemcpy2DUnaligned": (COPY, None, False, None),
    "cuMemcpyHtoDAsync": (COPY, "h2d", True, _DA), "cuMemcpyHtoDAsync_ptsz": (COPY, "h2d", True, _DA),
    "cuMemcpyDtoHAsync": (COPY, "d2h", True, _DA), "cuMemcpyDtoHAsync_ptsz": (COPY, "d2h", True, _DA),
    "cuMemcpyAsync": (COPY, None, True, _DA), "cuMemcpyAsync_ptsz": (COPY, None, True, _DA),
    "cuMemcpy2DAsync": (COPY, None, True, None), "cuMemcpy2DAsync_ptsz": (COPY, None, True, None),
}
_VERSION = re.compile(r"_v\d+")
_NO_WAIT = ("d2d", "h2h")  # copy directions the host never waits for (never reported)
_NO_SITE = Site()
# bound once: the callback runs per sync or copy API call of every thread while subscribed
_CallbackData, _API_ENTER, _MEMCPY_KIND = C.CallbackData, C.API_ENTER, C.CUDA_MEMCPY_KIND
_regions, _allows, _now = routing.regions, routing.allows, time.perf_counter_ns
_threads, _ident = routing.threads, threading.get_ident


def canonical(name: str) -> str:
    """``cudaMemcpyAsync_ptsz_v7000`` -> ``cudaMemcpyAsync_ptsz``; ``cuMemcpyHtoD_v2`` -> ``cuMemcpyHtoD``."""
    return _VERSION.sub("", name)


class CudaCall(NamedTuple):
    """One sync, copy or free API call the detector kept: what its parameters said, where and on
    which thread it was made, how long the host spent in it. It is the region's observation
    itself (``source == "cuda"``), appended to the region's list when the call returns (the C
    callback hands its Call over when the call begins, and writes the duration into it at the
    end, without taking the GIL again). The
    Python callback builds one of these per call; the C one (``_cuptifast_c/call.c``) builds a
    ``_cuptifast.Call`` with the same fields as attributes (its numbers stay C values until read,
    not nine objects made per copy), so everything downstream reads observations by attribute.
    A tuple here, not a frozen :class:`~syncguard.detectors.routing.Observation` plus a parameter
    object, which made three objects and a dict per copy."""

    api: str
    role: str
    kind: str | None = None  # the sync's kind; None for a copy (its direction says)
    direction: str | None = None  # h2d, d2h, d2d, h2h, or None when the call does not say
    is_async: bool = False
    correlation: tuple = ()  # this call's id and the driver calls' under it
    stream: int | None = None
    site: Site = _NO_SITE
    phase: str = RUN
    thread: str = ""
    allows: tuple = ()
    blocked_us: float | None = None
    nbytes: int | None = None
    src: int | None = None
    dst: int | None = None
    t_ns: int = 0  # perf_counter_ns at the call's ENTER

    source = "cuda"  # a class attribute, not a field: what the region filters observations by

    @property
    def host_ptr(self) -> int | None:
        return self.src if self.direction == "h2d" else self.dst if self.direction == "d2h" else None


# The Python callback's call in flight: a list indexed like CudaCall's fields, turned into one at
# EXIT (the driver calls under it append correlation ids, and the duration is known only then).
_FIELDS = CudaCall._fields
_CORR, _STREAM, _SITE, _PHASE, _THREAD, _ALLOWS, _BLOCKED, _NBYTES, _SRC, _DST, _T0 = (
    _FIELDS.index(f) for f in ("correlation", "stream", "site", "phase", "thread", "allows",
                               "blocked_us", "nbytes", "src", "dst", "t_ns"))
_DEFAULTS = [CudaCall._field_defaults.get(f) for f in _FIELDS]
_new_call = tuple.__new__


def _read_params(spec, params_ptr, call: list) -> None:
    if not params_ptr:
        return
    if spec is C.StreamParams:
        call[_STREAM] = C.StreamParams.from_address(params_ptr).stream or 0
    elif spec in (_P, _P2):
        p = spec.from_address(params_ptr)
        direction = call[3] or _MEMCPY_KIND.get(p.kind)
        # cudaMemcpyDefault: the pointers say (the activity record's copyKind, or the runtime)
        call[3] = None if direction == "default" else direction
        call[_STREAM] = p.stream or 0
        call[_SRC], call[_DST] = p.src, p.dst
        call[_NBYTES] = p.count if spec is _P else p.width * p.height
    elif spec is _D or spec is _DA:  # a driver copy: the direction is the API's own
        p = spec.from_address(params_ptr)
        call[_SRC], call[_DST], call[_NBYTES] = p.src, p.dst, p.count
        if spec is _DA:
            call[_STREAM] = p.stream or 0


_SPEC_CODE = {None: 0, C.StreamParams: 1, _P: 2, _P2: 3, _D: 4, _DA: 5}
_DIR_CODE = {None: 0, "h2d": 1, "d2h": 2, "d2d": 3, "h2h": 4}


def c_table(table: dict) -> dict:
    """The callback table as ``_cuptifast.configure`` reads it: (domain, cbid) -> (api, role,
    kind or None for a copy, is_async, params struct code, direction code)."""
    return {key: (api, role, None if role == COPY else kind, is_async, _SPEC_CODE[spec],
                  _DIR_CODE[kind] if role == COPY else 0)
            for key, (api, role, kind, is_async, spec) in table.items()}


def callback_table(lib) -> dict:
    """(domain, cbid) -> (api, role, kind, is_async, params) for the APIs the detector watches,
    resolved by name with CUPTI's own table (no callback is enabled to find them). Every id whose
    name is a watched API, whatever its version suffix: CUDA keeps the old entry point beside
    the new one (``cuMemcpyHtoDAsync`` and ``cuMemcpyHtoDAsync_v2``, ``cuCtxSynchronize`` and
    ``cuCtxSynchronize_v2``), and what cuda.h compiles a driver call to is the newest."""
    table = {}
    for domain, apis in ((C.DOMAIN_RUNTIME, RUNTIME_APIS), (C.DOMAIN_DRIVER, DRIVER_APIS)):
        for cbid in range(1, 2000):
            name = lib.callback_name(domain, cbid)
            if name is None:
                if cbid > 1200:
                    break
                continue
            api = canonical(name)
            spec = apis.get(api)
            if spec is not None:
                table[(domain, cbid)] = (api,) + spec
    if not any(d == C.DOMAIN_RUNTIME for d, _ in table):
        # a libcupti without callback names: the header's numbers (stable since CUDA 7)
        for full, cbid in C.RUNTIME_CBIDS.items():
            spec = RUNTIME_APIS.get(canonical(full))
            if spec:
                table[(C.DOMAIN_RUNTIME, cbid)] = (canonical(full),) + spec
    return table


class CallPath:
    """The callbacks (mixed into :class:`~syncguard.detectors.cuda.hub.CuptiHub`, which supplies
    ``table``, ``generation``, ``backward``, ``errors``, ``closing`` and ``_tls``)."""

    def _callback(self, userdata, domain, cbid, cbdata) -> None:
        # Hot path: one ENTER and one EXIT per enabled API call of any thread while subscribed.
        # Per-thread state is one list [generation, depth, call, regions] (one threading.local
        # lookup); the regions are read at ENTER and the call is appended to them at EXIT.
        try:
            if self.closing:  # CUPTI being lent to a profiler (hub.py)
                return
            entry = self.table.get((domain, cbid))
            if entry is None:
                return
            st = getattr(self._tls, "st", None)
            if st is None or st[0] != self.generation:
                # a thread with no region, no backward pass of one running: nothing to do
                if not _threads.get(_ident()) and not self.backward.active:
                    return
                st = self._tls.st = [self.generation, 0, None, ()]
            elif not st[1] and not _threads.get(_ident()) and not self.backward.active:
                return
            data = _CallbackData.from_address(cbdata)
            if data.callbackSite == _API_ENTER:
                depth = st[1]
                st[1] = depth + 1
                if depth:  # a driver call under the runtime call: the same wait, same event
                    if st[2] is not None:
                        st[2][_CORR].append(data.correlationId)
                    return
                st[2] = None
                regions, owner = _regions.get(), None
                if not regions:
                    owner = self.backward.owner()  # an autograd engine thread working for a region?
                    if owner is None:
                        return
                    regions = owner[0]
                st[3] = regions
                st[2] = self._enter(entry, data, regions, owner)
            else:
                depth = st[1] - 1 if st[1] > 0 else 0
                st[1] = depth
                if depth:
                    return
                call = st[2]
                if call is not None:
                    st[2] = None
                    call[_BLOCKED] = round((_now() - call[_T0]) / 1000, 1)
                    call[_CORR] = tuple(call[_CORR])
                    done = _new_call(CudaCall, call)
                    for r in st[3]:
                        r.observations.append(done)
                    st[3] = ()
        except BaseException:
            self.errors += 1

    def _enter(self, entry, data, regions, owner) -> list | None:
        api, role, kind, is_async, spec = entry
        call = _DEFAULTS.copy()
        call[0], call[1], call[4], call[_CORR] = api, role, is_async, [data.correlationId]
        if role == COPY:
            call[3] = kind
        else:
            call[2] = kind
        if role == FREE:
            ptr = ctypes.c_void_p.from_address(data.functionParams).value if data.functionParams else 1
            if not ptr:
                return None  # cudaFree(NULL) frees nothing: the idiom that initialises a context
        elif spec is not None:
            _read_params(spec, data.functionParams, call)
            if call[3] in _NO_WAIT:
                # A device-to-device or host-to-host copy never makes the host wait for the GPU;
                # its only use in combine() is to end a pending async copy's chance to pair with a
                # later sync, which needs its place in the sequence, not its line or duration.
                call[_CORR] = tuple(call[_CORR])
                done = _new_call(CudaCall, call)
                for r in regions:
                    r.observations.append(done)
                return None  # nothing to time at EXIT
        # the frame that made the CUDA call (None on a thread with no Python frames)
        site, call[_PHASE] = site_and_phase(sys._getframe(1).f_back)
        if owner is None:
            call[_THREAD] = threading.current_thread().name
            call[_ALLOWS] = _allows.get()
        else:  # no Python frames of the user's on a C++ autograd thread: the backward() line
            call[_THREAD] = f"autograd engine (backward of {owner[3]})"
            call[_ALLOWS] = owner[1]
            if site.filename is None:
                site = owner[2]
        call[_SITE] = site
        call[_T0] = _now()
        return call


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
        self._variable = None  # torch's Variable class, imported once
        self._proxy = None  # the proxy installed last, reused while torch's engine is the same
        #: counts a region's backward pass in the C callback's routing table (+1 at its start, -1
        #: at its end), so that the engine's threads, which have no region, are looked at then
        self.count = None

    def install(self) -> None:
        Variable = self._variable
        if Variable is None:
            try:
                from torch.autograd.variable import Variable
            except ImportError:
                return
            self._variable = Variable
        engine = Variable.__dict__.get("_execution_engine")
        if engine is None or isinstance(engine, _EngineProxy):
            return
        self._saved = (Variable, engine)
        proxy = self._proxy
        if proxy is None or proxy._engine is not engine:  # one proxy per engine, not per region
            proxy = self._proxy = _EngineProxy(engine, self)
        Variable._execution_engine = proxy

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
        count = None
        if outer is None:
            regions = routing.regions.get()
            active[me] = (regions, routing.allows.get(),
                          user_site(sys._getframe(1)), threading.current_thread().name)
            if regions:
                count = self._owners.count
                if count is not None:
                    count(1)
        try:
            return self._engine.run_backward(*args, **kwargs)
        finally:
            if outer is None:
                active.pop(me, None)
                if count is not None:
                    count(-1)
