"""The process's CUPTI subscription: taken at the first cuda region, kept, lent to a profiler.

CUPTI allows one subscriber per process (before CUPTI 13.2). The hub subscribes at the first
region that asks for the cuda detector and keeps the subscription, every callback id on, for the
process's life: a region is an entry in a routing table keyed by thread (the C callback's is
``_cuptifast_c/routing.c``, the Python callback's :data:`syncguard.detectors.routing.threads`);
entering and leaving one switches its thread's entry, never subscribe nor unsubscribe. A callback
on a thread with no region returns at once (in C without the GIL). The Python callback, where the
C one did not build, costs a ctypes call per callback, so its ids are on only while a region is
open (switching ids of a kept subscription never hurt a thread; unsubscribing beside one did).

A ``torch.profiler`` (Kineto) starting wants the one subscriber slot. Its start is wrapped
(``torch.autograd.profiler``'s ``_prepare_profiler`` and ``_enable_profiler``, which every
profiler of torch 2.8 to 2.14 calls there) so that the hub lends CUPTI first: the gate shut (every
callback returns at once), every id off, the callbacks still running drained with the GIL
released, then unsubscribed. Regions open then go on with sync-debug mode (detector ``debug``)
and say so. At the profiler's stop (``_disable_profiler``) the hub tries to subscribe again;
where Kineto keeps its subscriber, that fails, and every later region runs without the cuda
detector, its report giving the reason (:attr:`CuptiHub.weaker`), which names the remedy
(``TEARDOWN_CUPTI=1``, never set by syncguard: :func:`kept_remedy`); each later region tries again.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading

from syncguard.detectors import routing
from syncguard.detectors.cuda import cupti as C
from syncguard.detectors.cuda.calls import BackwardOwners, CallPath, callback_table
from syncguard.detectors.cuda.hostmem import ActivityRecords
from syncguard.detectors.cuda.lending import DRAIN_S, Lending, unwrap
from syncguard.detectors.seam import DetectorUnavailable

_threads, _get_ident = routing.threads, threading.get_ident


class CuptiCalls:
    """How the hub talks to libcupti: subscribe and switch every callback id on, switch them off,
    give the subscription back. Through the C module where it can call CUPTI itself (a real
    library's entry points); else through ctypes (a fake library in the CPU tests, or the Python
    callback). Needs the hub's ``lib``, ``table``, ``handle``, ``fast``, ``_cb``, ``_cb_fast``,
    ``_c_addr``, ``closing`` and ``activity``."""

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
        """Subscribe (``fresh``) and switch every id on; CUPTI's result code. Where this CUPTI
        takes ``allowMultipleSubscribers`` (13.2 and newer), subscribed beside any other
        subscriber (``shared``); where that is refused, the one-subscriber way."""
        shared = self._shared_subscribe() if fresh else None
        if shared is not None and self._on_with(fresh, shared) == C.SUCCESS:
            self.shared = True
            return C.SUCCESS
        if fresh:
            self.shared = False
        return self._on_with(fresh, None)

    def _shared_subscribe(self):
        """cuptiSubscribe_v2 where the loaded CUPTI takes allowMultipleSubscribers, else None."""
        ask = getattr(self.lib, "shared_subscribe", None)
        if ask is None or os.environ.get("SYNCGUARD_CUDA_SHARED", "1") == "0":
            return None
        try:
            return ask()
        except Exception:  # a CUPTI that cannot say: the one-subscriber way
            return None

    def _on_with(self, fresh: bool, shared) -> int:
        c = self._c_entry()
        if c is not None and (shared is None or isinstance(shared, ctypes._CFuncPtr)):
            # one call into C, which also makes every thread's call state stale
            extra = () if shared is None else (ctypes.cast(shared, ctypes.c_void_p).value,)
            code, handle, _ = self.fast.on(c[0], c[1], self.handle.value or 0, *extra)
            if code == C.SUCCESS:
                self.handle.value = handle
            return code
        if fresh:
            cb = self._cb if self.fast is None else self._cb_fast
            if shared is not None:
                params = C.SubscriberParams(structSize=ctypes.sizeof(C.SubscriberParams),
                                            subscriberName=b"syncguard", allowMultipleSubscribers=1)
                code = shared(ctypes.byref(self.handle), cb, None, ctypes.byref(params))
            else:
                code = self.lib.lib.cuptiSubscribe(ctypes.byref(self.handle), cb, None)
            if code != C.SUCCESS:
                self.handle.value = None
                return code
        try:
            if self.fast is not None:
                self.fast.new_generation()
                self.fast.open()
            self._switch(1)
        except BaseException:
            if fresh:  # subscribed before it failed: given back
                self._switch_off_and_unsubscribe()
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

    def _switch_off_and_unsubscribe(self) -> bool:
        """Give the subscription back beside threads that may be inside CUDA calls: the gate shut
        (every callback returns at once), every id off, the callbacks of ours still running
        waited for with the GIL released (C callback), then unsubscribed. True when they were
        drained in time (else unsubscribed anyway after :data:`DRAIN_S`)."""
        self.closing = True  # the Python callback's gate
        fast, drained = self.fast, True
        if fast is not None:
            fast.shut()
        try:
            self._switch(0)
        finally:  # given back even if switching off failed
            if fast is not None:
                drained = fast.drain(DRAIN_S)
            self.lib.lib.cuptiUnsubscribe(self.handle)
            self.handle.value = None
            if self.activity.on:
                self.activity.disable()
        return drained


class CuptiHub(CallPath, CuptiCalls, Lending):
    """The process's CUPTI subscription, the routing table of its regions, the hand-over.

    What others read: ``handed`` (CUPTI is with a profiler now), ``hand_overs`` (how often it was
    lent), ``shared`` (subscribed beside other subscribers, CUPTI >= 13.2), ``weaker`` (None, or
    why a region entered now runs without the cuda detector), :meth:`lent`."""

    def __init__(self) -> None:
        self.lock = _hub_lock()
        self.generation = 0
        self.lib: C.Cupti | None = None
        self.handle = ctypes.c_void_p()
        self.subscribed = False
        self.handed = False
        self.hand_overs = 0
        self.shared = False
        self.weaker: str | None = None
        self.closing = False  # the Python callback returns at once (a hand-over under way)
        self.activity = ActivityRecords()
        self.table: dict[tuple[int, int], tuple] = {}  # (domain, cbid) -> (api, role, kind, async, params)
        self.regions: list = []
        self.errors = 0  # exceptions swallowed in callbacks (never raised into CUDA)
        self._ids_on = False
        self._with = None  # the callback CUPTI was given (``fast`` then)
        self._debug = False  # sync-debug mode armed for the regions open at a hand-over
        self._saved_profiler: list = []
        self.backward = BackwardOwners()
        self._tls = threading.local()
        self._cb = C.CALLBACK(self._callback)  # kept alive as long as the hub: CUPTI calls it
        #: the C callback (``_cuptifast``) once configured; None: the Python one (``_cb``) runs
        self.fast = None
        self._cb_fast = None  # the C callback as a ctypes function pointer (fast_callback)
        self._c_addr = None  # see CuptiCalls._c_entry
        self._ready = False  # unavailable() said None once: acquire need not ask again
        self._profiler_wrappers: dict = {}  # torch's profiler function -> its wrapper
        self.callback = "Python callback (CUPTI not loaded yet)"
        #: how pageable/pinned is decided: "pointer" (cudaPointerGetAttributes on the host pointer
        #: when the region exits, never in a callback) or "activity" (CUPTI MEMCPY records).
        self.hostmem = os.environ.get("SYNCGUARD_CUDA_HOSTMEM", "pointer")
        if self.hostmem not in ("pointer", "activity"):
            raise ValueError(f"SYNCGUARD_CUDA_HOSTMEM must be 'pointer' or 'activity', got {self.hostmem!r}")

    @property
    def users(self) -> int:
        """How many regions hold the subscription now (each listed in ``regions`` once)."""
        return len(self.regions)

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
        self.backward.count = None if self.fast is None else self.fast.route_backward

    # -- regions ----------------------------------------------------------------------------------
    def acquire(self, region) -> None:
        with self.lock:
            # once available, always: torch stays imported, the library and its table stay loaded
            why = None if self._ready else self.unavailable()
            if why:
                raise DetectorUnavailable(why)
            if self.users == 0 or not self.subscribed:  # else held, and a region open already
                if self.subscribed and self.users == 0 and self._with is not self.fast:
                    self._give_back()  # the callback was changed (bench, tests): subscribe it
                if not self.subscribed:
                    self._take()
                if self.users == 0:
                    self._first_region()
            self.regions.append(region)
            thread = _get_ident()
            region.state["cuda_thread"] = thread
            _threads[thread] = _threads.get(thread, 0) + 1  # routing.route, inline: every region
            if self.fast is not None:
                self.fast.route(thread, 1)

    def release(self, region) -> None:
        with self.lock:
            regions = self.regions
            if regions and regions[-1] is region:  # the last entered, as nearly always
                regions.pop()
            elif region in regions:
                regions.remove(region)
            else:
                return
            thread = region.state.pop("cuda_thread", 0)
            if thread:  # routing.route, inline: every region
                n = _threads.get(thread, 0) - 1
                if n > 0:
                    _threads[thread] = n
                else:
                    _threads.pop(thread, None)
                if self.fast is not None:
                    self.fast.route(thread, -1)
            if self.users == 0:
                self._last_region()

    def _route(self, thread: int, delta: int) -> None:
        if thread:
            routing.route(thread, delta)
            if self.fast is not None:
                self.fast.route(thread, delta)

    def _first_region(self) -> None:
        try:
            if self.fast is None and not self._ids_on:  # the Python callback: ids on while needed
                self._switch(1)
                self._ids_on = True
            if self.hostmem == "activity":
                self.activity.enable(self.lib)
            self.backward.install()
        except BaseException as e:
            self._last_region()
            raise DetectorUnavailable(str(e)) from None

    def _last_region(self) -> None:
        try:
            self.backward.restore()
            if self.activity.on:
                self.activity.disable()
            if self.fast is None and self._ids_on and self.subscribed:
                self._ids_on = False
                self._switch(0)
            if self.fast is not None:  # no region kept alive by the C callback's memory
                self.fast.forget()
        finally:
            if self._debug:
                from syncguard.detectors.hooks import HUBS
                HUBS.debug.disarm()
                self._debug = False
            if self.activity.records:
                self.activity.records.clear()
            self.backward.ambiguous = 0

    def flush(self) -> None:
        with self.lock:
            if self.subscribed:
                self.activity.flush()

    def close(self) -> None:
        """Everything undone: the subscription given back, torch's profiler functions restored,
        every route of this hub's regions dropped (tests and tools; a process never needs it)."""
        with self.lock:
            if self.subscribed:
                self._give_back()
            unwrap(self._saved_profiler)
            for r in self.regions:
                self._route(r.state.pop("cuda_thread", 0), -1)
            self.regions.clear()
            self._last_region()
            self.handed, self.weaker = False, None


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
    # the C table holds the threads the Python one does (regions open before it was configured)
    _cuptifast.clear_routes()
    for thread, n in routing.threads.items():
        _cuptifast.route(thread, n)
    hub._cb_fast = C.CALLBACK(_cuptifast.callback_address())
    routing.scopes_changed = _cuptifast.scopes_changed  # what its GIL-free repeats check
    return _cuptifast, "C callback"


def _hub_lock():
    """A re-entrant lock: the C module's (which its fused region entry takes without a Python
    call) where it was built, else threading's."""
    try:
        from syncguard.detectors.cuda import _cuptifast
    except ImportError:
        return threading.RLock()
    return _cuptifast.HubLock()


def _thread_name() -> str:
    return threading.current_thread().name


HUB = CuptiHub()
