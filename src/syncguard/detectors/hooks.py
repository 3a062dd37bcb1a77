"""The torch-hook detectors' machinery: the process-global hubs that arm and restore them.

* ``debug``: torch's sync-debug mode armed at "warn"; its warning is caught on the thread that
  synced, before any warning filter (pytest's, ``-W error``) can turn it into an exception.
* ``trace``: thin wrappers on the few Python entry points whose syncs need naming: copies
  (direction, pageable host memory with ``non_blocking=True``), ``empty_cache()`` (``cudaFree``)
  and the explicit synchronize calls. Installed while a region is open, restored after.
* ``gpu_trace`` (opt-in, leaves a lasting hook): torch's own CUDA trace callbacks.
* ``profile`` (opt-in): CUDA runtime calls recorded by the PyTorch profiler, which names the aten
  op and the exact runtime call and sees copies made inside ops; it costs far more, so it is for
  diagnosis, not for every test.

All are process-global resources. The hubs here arm them once for any number of regions and
restore the exact previous state when the last region ends (except ``gpu_trace``, which torch
cannot undo); :mod:`syncguard.detectors.routing` decides which region an observation belongs to,
:mod:`syncguard.detectors.profiler` classifies what the profiler recorded. The detector classes
behind the seam are in :mod:`syncguard.detectors.torch_hooks`. Nothing here
touches CUDA at import time.
"""
from __future__ import annotations

import contextlib
import functools
import re
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

from syncguard.attribution.frames import current_phase, user_site
from syncguard.detectors.profiler import TraceRecord, records_from_profiler
from syncguard.detectors.routing import Observation, Sink
from syncguard.records.events import (BLOCKING_COPY_D2H, BLOCKING_COPY_H2D, DEVICE_SYNC, EVENT_SYNC, IMPLICIT_FREE,
                                      PAGEABLE_COPY, STREAM_SYNC)

SYNC_WARNING = "called a synchronizing CUDA operation"
PROTOTYPE_WARNING = "Synchronization debug mode is a prototype feature"


class _SharedState:
    """Process-global state armed once for any number of regions; the last one restores it.

    Subclasses define ``_install`` (may raise: whatever it changed is then undone) and
    ``_restore`` (must cope with a partial install).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0

    @property
    def armed(self) -> bool:
        return self._users > 0

    def arm(self, *args) -> None:
        with self._lock:
            self._users += 1
            if self._users > 1:
                return
            try:
                self._install(*args)
            except BaseException:
                self._users = 0
                self._restore()
                raise

    def disarm(self) -> None:
        with self._lock:
            if self._users == 0:
                return
            self._users -= 1
            if self._users == 0:
                self._restore()

    def _install(self, *args) -> None:
        raise NotImplementedError

    def _restore(self) -> None:
        raise NotImplementedError


def _filters_mutated() -> None:
    """Tell the warnings module its filter list changed (it caches what a filter decided)."""
    mutated = getattr(warnings, "_filters_mutated", None) or getattr(
        warnings, "_filters_mutated_lock_held", None)
    if mutated:
        mutated()


class DebugHub(_SharedState):
    """Arms torch's sync-debug mode at "warn" for as long as any region needs it.

    The warning is taken at ``warnings._showwarnmsg``, which ``catch_warnings`` (pytest's per-test
    one included) leaves alone, and a front filter makes it "always" shown so that ``-W error``
    cannot turn it into an exception inside the user's op. A sync on a thread with no region is
    handled as the mode found at arming time would have: dropped, warned, or raised.
    """

    def __init__(self) -> None:
        super().__init__()
        self._saved: dict[str, Any] = {}
        self.sink: Sink | None = None

    def _install(self, sink: Sink) -> None:
        import torch

        self.sink = sink
        mode = torch.cuda.get_sync_debug_mode()  # first: it raises where CUDA cannot start
        before = list(warnings.filters)
        warnings.filterwarnings("ignore", message=re.escape(PROTOTYPE_WARNING))
        warnings.filterwarnings("always", message=re.escape(SYNC_WARNING), category=UserWarning)
        # Each went first, and filterwarnings took an identical filter of the user's out of its
        # place to put it there: the first two are the hub's, and the user's list goes back
        # behind them as it was (in place: the same list), so that taking the hub's two off
        # the front in _restore leaves it exactly as it was.
        ours = warnings.filters[:2]
        warnings.filters[:] = ours + before
        _filters_mutated()
        self._saved = {"mode": mode, "filters": ours,
                       "show": warnings._showwarnmsg}  # type: ignore[attr-defined]
        warnings._showwarnmsg = self._show  # type: ignore[attr-defined]
        torch.cuda.set_sync_debug_mode("warn")

    def _restore(self) -> None:
        saved, self._saved = self._saved, {}
        if not saved:
            return
        try:
            import torch

            torch.cuda.set_sync_debug_mode(saved["mode"])
        finally:
            if warnings._showwarnmsg == self._show:  # type: ignore[attr-defined]
                warnings._showwarnmsg = saved["show"]  # type: ignore[attr-defined]
            for f in saved["filters"]:  # the first of equal filters: the hub's, in front
                if f in warnings.filters:
                    warnings.filters.remove(f)
            _filters_mutated()
            self.sink = None

    def _show(self, msg) -> None:
        text = str(msg.message)
        if issubclass(msg.category, UserWarning) and text.startswith(SYNC_WARNING):
            inside = getattr(_tls, "inside", None)
            if inside is not None and self.sink is not None:
                inside.append("cudaStreamSynchronize")  # a wrapped call names this sync itself
                _tls.debug_saw = True  # ... and says sync-debug mode saw it too
                return
            sink = self.sink
            handled = sink is not None and sink(Observation(
                "debug", user_site(), threading.current_thread().name,
                api="cudaStreamSynchronize", kind=STREAM_SYNC, t_ns=time.perf_counter_ns(),
                phase=current_phase()))
            if handled:
                return
            mode = self._saved.get("mode", 0)
            if mode in (2, "error"):
                raise RuntimeError(text)
            if mode in (0, "default"):
                return
        elif issubclass(msg.category, UserWarning) and text.startswith(PROTOTYPE_WARNING):
            return
        self._saved.get("show", warnings._showwarnmsg_impl)(msg)  # type: ignore[attr-defined]



class ProfileHub:
    """One profiler for the process, started by the first region that wants a trace.

    Regions and allow scopes open named ranges (markers) on the profiler's thread; a runtime
    call belongs to a region when the region's marker is among its host ancestors. Only the thread
    that started the profiler records host ranges, so a region on another thread at the same time
    gets no trace (its report says so) rather than a wrong one.
    """

    def __init__(self) -> None:
        self.prof = None
        self.owner: int | None = None
        self.owner_native: int | None = None  # OS thread id, as the profiler records it
        self.open: list[list] = []  # [name, handle] in opening order

    def available(self) -> tuple[bool, str | None]:
        if self.prof is not None:
            if self.owner == threading.get_ident():
                return True, None
            return False, "the profiler is recording for a region on another thread"
        try:
            import torch.autograd.profiler as ap

            if ap._is_profiler_enabled:
                return False, "another profiler is active"
        except (ImportError, AttributeError):
            pass
        return True, None

    def start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        with warnings.catch_warnings(), _muted():
            warnings.simplefilter("ignore")
            prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True)
            prof.start()
        self.prof, self.owner = prof, threading.get_ident()
        self.owner_native = threading.get_native_id()
        for item in self.open:
            item[1] = torch.ops.profiler._record_function_enter_new(item[0], None)

    def push(self, name: str) -> None:
        import torch

        self.open.append([name, torch.ops.profiler._record_function_enter_new(name, None)])

    def pop(self, name: str) -> None:
        import torch

        for i in range(len(self.open) - 1, -1, -1):
            if self.open[i][0] == name:
                _, handle = self.open.pop(i)
                if handle is not None:
                    torch.ops.profiler._record_function_exit._RecordFunction(handle)
                return

    def harvest(self, keep: bool) -> list[TraceRecord]:
        """Stop, read, and (when regions remain open) start again with their markers reopened."""
        import torch

        prof, self.prof, self.owner = self.prof, None, None
        for item in reversed(self.open):
            if item[1] is not None:
                torch.ops.profiler._record_function_exit._RecordFunction(item[1])
                item[1] = None
        with warnings.catch_warnings(), _muted():
            warnings.simplefilter("ignore")
            prof.stop()  # its own cudaDeviceSynchronize is not the user's
            records = records_from_profiler(prof.events())
        if keep:
            self.start()
        else:
            self.open.clear()
        return records


# ---------------------------------------------------------------------------------------------
# The trace detector: torch's CUDA trace callbacks, plus wrappers that name what they saw.

_tls = threading.local()  # .inside: list of sync APIs seen during a wrapped call, or None


@contextlib.contextmanager
def _muted():
    """syncguard's own waits (the profiler starting and stopping) reach no region."""
    saved = getattr(_tls, "inside", None)
    _tls.inside = []
    try:
        yield
    finally:
        _tls.inside = saved


def _num_frees() -> int:
    import torch

    return int(torch.cuda.memory_stats().get("num_device_free", 0))


def _host_side(t) -> bool:
    return getattr(t, "device", None) is not None and t.device.type == "cpu"


def _copy_observation(src, dst, non_blocking: bool, syncs: list[str]):
    """Kind of a copy from what moved where; src may be host data that is not a tensor."""
    src_host = src is None or not hasattr(src, "device") or src.device.type == "cpu"
    dst_host = dst is None or dst.device.type == "cpu"
    direction = "h2d" if src_host and not dst_host else "d2h" if dst_host and not src_host else None
    if syncs:
        kind = {"h2d": BLOCKING_COPY_H2D, "d2h": BLOCKING_COPY_D2H}.get(direction, STREAM_SYNC)
        return kind, syncs[0]
    if non_blocking and direction:
        host = src if direction == "h2d" else dst
        # an empty copy moves nothing and waits for nothing (empty tensors never report pinned)
        if _host_side(host) and host.numel() and not host.is_pinned():
            return PAGEABLE_COPY, "cudaMemcpyAsync"
    return None


def _first_bool(args, kwargs, name="non_blocking", pos=None) -> bool:
    if name in kwargs:
        return bool(kwargs[name])
    if pos is not None:
        return len(args) > pos and bool(args[pos])
    return any(a is True for a in args)


def _hooks():
    """(owner, attribute, label, before, classify(args, kwargs, out, syncs, before))."""
    import torch

    def api(kind, name):
        # these calls always wait (sync-debug mode does not flag them): no trace needed to know
        return lambda a, k, out, syncs, before: (kind, name)

    def free(a, k, out, syncs, before):
        freed = _num_frees() - before
        return (IMPLICIT_FREE, "cudaFree", freed) if freed > 0 else None

    hooks = [
        (torch.cuda, "synchronize", "torch.cuda.synchronize", None,
         api(DEVICE_SYNC, "cudaDeviceSynchronize")),
        (torch.cuda.Stream, "synchronize", "Stream.synchronize", None,
         api(STREAM_SYNC, "cudaStreamSynchronize")),
        (torch.cuda.Event, "synchronize", "Event.synchronize", None,
         api(EVENT_SYNC, "cudaEventSynchronize")),
        (torch.cuda, "empty_cache", "torch.cuda.empty_cache", _num_frees, free),
        (torch.cuda.memory, "empty_cache", "torch.cuda.empty_cache", _num_frees, free),
        (torch.Tensor, "to", "Tensor.to", None,
         lambda a, k, out, syncs, b: _copy_observation(a[0], out, _first_bool(a[1:], k), syncs)),
        (torch.Tensor, "cuda", "Tensor.cuda", None,
         lambda a, k, out, syncs, b: _copy_observation(a[0], out, _first_bool(a, k, pos=2), syncs)),
        (torch.Tensor, "copy_", "Tensor.copy_", None,
         lambda a, k, out, syncs, b: _copy_observation(a[1] if len(a) > 1 else k.get("src"), a[0],
                                                       _first_bool(a, k, pos=2), syncs)),
        (torch, "tensor", "torch.tensor", None,
         lambda a, k, out, syncs, b: _copy_observation(a[0] if a else None, out, False, syncs)),
        (torch, "as_tensor", "torch.as_tensor", None,
         lambda a, k, out, syncs, b: _copy_observation(a[0] if a else None, out, False, syncs)),
    ]
    acc = getattr(torch, "accelerator", None)
    if acc is not None and hasattr(acc, "synchronize"):
        hooks.append((acc, "synchronize", "torch.accelerator.synchronize", None,
                      api(DEVICE_SYNC, "cudaDeviceSynchronize")))
    return hooks


class TraceHub(_SharedState):
    """Arms the trace detector's wrappers for as long as any region needs it.

    Thin wrappers on the Python entry points whose syncs need naming (copies, explicit
    synchronize calls, ``empty_cache``), installed while armed only and restored exactly after:
    nothing stays behind. A stream sync inside a wrapped call (flagged by sync-debug mode, or by the
    opt-in ``gpu_trace`` hook) is named by the wrapper instead of being reported twice.
    """

    def __init__(self) -> None:
        super().__init__()
        self._saved: list[tuple[Any, str, bool, Any]] = []
        self.sink: Sink | None = None
        self.active: Callable[[], bool] = lambda: False
        self.around: Callable[[str], Any] | None = None  # profile markers around a wrapped call

    def _install(self, sink: Sink, active: Callable[[], bool], around: Callable[[str], Any]) -> None:
        self.sink, self.active, self.around = sink, active, around
        for owner, attr, label, before, classify in _hooks():
            own = attr in vars(owner)
            original = vars(owner)[attr] if own else getattr(owner, attr)
            self._saved.append((owner, attr, own, original))
            setattr(owner, attr, self._wrap(original, label, before, classify))

    def _restore(self) -> None:
        for owner, attr, own, original in reversed(self._saved):
            if own:
                setattr(owner, attr, original)
            else:
                try:
                    delattr(owner, attr)
                except AttributeError:
                    pass
        self._saved.clear()
        self.sink, self.around = None, None
        self.active = lambda: False

    def _wrap(self, fn, label, before, classify):
        hub = self

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if hub.sink is None or getattr(_tls, "inside", None) is not None or not hub.active():
                return fn(*args, **kwargs)
            site = user_site()
            phase = current_phase()
            state = before() if before else None
            syncs: list[str] = []
            _tls.inside, _tls.debug_saw = syncs, False
            out = marker = None
            t0 = time.perf_counter_ns()
            try:
                with hub.around(label) as marker:
                    out = fn(*args, **kwargs)
            finally:
                _tls.inside = None
                elapsed = (time.perf_counter_ns() - t0) / 1000
                found = classify(args, kwargs, out, syncs, state)
                sink = hub.sink
                if found and sink is not None:
                    kind, api = found[0], found[1]
                    count = found[2] if len(found) > 2 else 1
                    sink(Observation("trace", site, threading.current_thread().name, api=api,
                                     kind=kind, marker=marker, t_ns=t0, blocked_us=round(elapsed, 1),
                                     count=count, phase=phase,
                                     detail=("debug",) if getattr(_tls, "debug_saw", False) else ()))
            return out

        return wrapper


class GpuTraceHub(_SharedState):
    """Opt-in detector ``gpu_trace``: torch's own CUDA trace callbacks (``torch.cuda._gpu_trace``).

    It names stream, device and event syncs on the syncing thread, but it LEAVES A LASTING HOOK:
    torch's trace callbacks cannot be unregistered and their activation cannot be undone, so once
    armed they stay for the life of the process (idle while no region is open). After such a hook
    is active, a user's own ``set_sync_debug_mode("error")`` raises SystemError instead of
    RuntimeError. Never part of the default; name it to use it.
    """

    def __init__(self) -> None:
        super().__init__()
        self._registered = False
        self.sink: Sink | None = None

    def _install(self, sink: Sink) -> None:
        import torch

        self.sink = sink
        if not self._registered:
            import torch.cuda._gpu_trace as gt
            gt.register_callback_for_stream_synchronization(lambda s: self._on_sync("cudaStreamSynchronize"))
            gt.register_callback_for_device_synchronization(lambda: self._on_sync("cudaDeviceSynchronize"))
            gt.register_callback_for_event_synchronization(lambda e: self._on_sync("cudaEventSynchronize"))
            torch._C._activate_gpu_trace()
            self._registered = True

    def _restore(self) -> None:
        self.sink = None

    def _on_sync(self, api: str) -> None:
        sink = self.sink
        if sink is None:
            return
        inside = getattr(_tls, "inside", None)
        if inside is not None:
            inside.append(api)  # the wrapper around this call names it
            return
        # A stream sync inside an aten op (item, nonzero, tolist, a mask index...) is torch
        # waiting for a device-to-host read, as far as this hook can tell.
        kind = {"cudaStreamSynchronize": BLOCKING_COPY_D2H, "cudaDeviceSynchronize": DEVICE_SYNC,
                "cudaEventSynchronize": EVENT_SYNC}[api]
        sink(Observation("gpu_trace", user_site(), threading.current_thread().name, api=api,
                         kind=kind, t_ns=time.perf_counter_ns(), phase=current_phase()))


@dataclass
class Hubs:
    debug: DebugHub = field(default_factory=DebugHub)
    trace: TraceHub = field(default_factory=TraceHub)
    gpu_trace: GpuTraceHub = field(default_factory=GpuTraceHub)
    profile: ProfileHub = field(default_factory=ProfileHub)


HUBS = Hubs()
