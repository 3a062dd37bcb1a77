"""Race detection: stream against stream, and host against in-flight copies of pinned buffers.

Removing a sync can expose two kinds of race, and one run checks both:

* **Stream races.** A kernel on one stream reads (or writes) a tensor that another stream wrote (or
  read) with nothing ordering the two. This reuses torch's CUDA sanitizer bookkeeping
  (``torch.cuda._sanitizer``: ``EventHandler``, ``StreamSynchronizations``, ``ArgumentHandler``):
  every aten op launched on the auditing thread is an access per data pointer (read or write, from
  the op's schema) with a sequence number on its stream, and ``wait_stream``, ``Event.record/wait``,
  ``synchronize`` arrive through the ``torch.cuda._gpu_trace`` callbacks and build a happens-before
  relation. The sanitizer's errors become :class:`~syncguard.records.events.RaceEvent` records instead of
  exceptions.
* **Pinned-buffer races.** The host writes a pinned tensor while a ``non_blocking=True`` copy out
  of it (host to device) may still be reading it, or writes or reads a pinned tensor that a
  non-blocking device-to-host copy may still be filling.

How detection is deterministic
------------------------------
Nothing here depends on how long a kernel or copy happens to take, and the device is never polled:
both checks reason only about the order in which the *host observed* things. Each non-blocking
copy between a CUDA tensor and a pinned CPU tensor is recorded against the pinned bytes with its
stream and its sequence number in the sanitizer's vector clocks. The copy counts as finished only
once the host has observed a sync that covers it: ``Event.synchronize()`` on an event recorded
after it, ``Stream.synchronize()``, ``torch.cuda.synchronize()``, a blocking copy or ``.item()`` on
that stream, or ``Event.query()`` / ``Stream.query()`` returning True (those two are wrapped while a
detector runs; everything else comes from the ``_gpu_trace`` sync callbacks). Any aten op on the
CPU that writes overlapping bytes before then, or reads the destination of an unfinished
device-to-host copy, is a race on every run, even when the copy happened to finish in time. Host
writes torch cannot see (through a numpy view or a raw pointer) are caught by checksum: the source
of each unfinished host-to-device copy is checksummed (adler32) when the copy is launched and again
when a sync first covers it (or at ``stop()`` if none does); changed bytes are a race, reported at
that sync's line. Limits of the checksum: buffers over ``checksum_max_bytes`` are skipped, a write
that leaves the bytes as they were is invisible, and unseen writes into a device-to-host
destination are not detected (the copy changes those bytes itself).

Scope and cost
--------------
Ops are seen through a ``TorchDispatchMode`` pushed on the thread that called ``start()``, so only
that thread's launches are checked (syncs from any thread count). Ops launched inside C++ (the
pinned staging inside ``index_put_`` with a CPU mask, NCCL, custom kernels not dispatched through
aten) are invisible. While a detector runs, every op costs a Python call and every kernel launch a
stack capture (see ``bench/bench_races.py``). After the first ``start()`` some cost stays for the
life of the process, because ``torch._C._activate_gpu_trace()`` cannot be undone: every caching
allocator malloc/free, event create/record/wait/destroy, stream creation and sync calls into
Python, and our callbacks return at once when no detector is active. Importing
``torch.cuda._sanitizer`` also registers torch's own sanitizer callbacks, which capture a stack on
every allocation; unless that sanitizer is enabled (``TORCH_CUDA_SANITIZER``) they are gated to do
nothing, and they resume if it is enabled later.
"""
from __future__ import annotations

import ctypes
import dataclasses
import threading
import weakref
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from syncguard.attribution.frames import is_internal as _is_internal, user_site
from syncguard.records.events import RACE, RaceEvent

__all__ = ["RaceDetector", "PinnedTracker", "PinnedOps"]

#: Ops whose syncs (fired inside the op) come after the op's own device work: a blocking copy or
#: ``.item()`` enqueues the copy and then waits for its stream. Replaying such a sync after the
#: launch is recorded keeps "blocking copy on a side stream, then write on the default stream"
#: from looking like a race (torch's sanitizer records the launch after the sync and would).
_SYNC_AT_END = frozenset({"aten::copy_", "aten::_to_copy", "aten::_local_scalar_dense"})
_COPY_OPS = frozenset({"aten::copy_", "aten::_to_copy"})
#: Ops that take a tensor but touch only its metadata, never its bytes.
_METADATA_OPS = frozenset({"aten::is_pinned", "aten::_is_pinned", "aten::record_stream",
                           "aten::set_", "aten::resize_", "aten::resize_as_", "aten::is_same_size",
                           "aten::is_set_to", "aten::_has_compatible_shallow_copy_type"})

# (register function in torch.cuda._gpu_trace, EventHandler method, is a host sync)
_TRACE = (
    ("register_callback_for_event_creation", "_handle_event_creation", False),
    ("register_callback_for_event_deletion", "_handle_event_deletion", False),
    ("register_callback_for_event_record", "_handle_event_record", False),
    ("register_callback_for_event_wait", "_handle_event_wait", False),
    ("register_callback_for_memory_allocation", "_handle_memory_allocation", False),
    ("register_callback_for_memory_deallocation", "_handle_memory_deallocation", False),
    ("register_callback_for_stream_creation", "_handle_stream_creation", False),
    ("register_callback_for_device_synchronization", "_handle_device_synchronization", True),
    ("register_callback_for_stream_synchronization", "_handle_stream_synchronization", True),
    ("register_callback_for_event_synchronization", "_handle_event_synchronization", True),
)


# ---------------------------------------------------------------------------------------------
# Small helpers

def _fmt_stream(stream: int) -> str:
    return "0 (default)" if stream == 0 else f"0x{stream:x}"


def _site_str(site: tuple[str | None, int | None]) -> str:
    return f"{site[0]}:{site[1]}" if site[0] else "<unknown>"


def _here() -> tuple[str | None, int | None]:
    s = user_site()
    return s.filename, s.lineno


def frames_site(stack: Iterable[Any]) -> tuple[str | None, int | None]:
    """The innermost frame outside torch and syncguard of an outermost-first frame list."""
    for fs in reversed(list(stack)):
        if not _is_internal(fs.filename):
            return fs.filename, fs.lineno
    return None, None


def describe(t: Any, data_ptr: int | None = None) -> str:
    """``shape (4096,) float32 @0x7f..`` for a tensor; just the pointer when it is unknown."""
    ptr = data_ptr if data_ptr is not None else (t.data_ptr() if t is not None else None)
    where = f"@0x{ptr:x}" if isinstance(ptr, int) else "@?"
    if t is None:
        return f"tensor {where}"
    return f"shape {tuple(t.shape)} {str(t.dtype).replace('torch.', '')} {where}"


def byte_range(t: Any) -> tuple[int, int] | None:
    """[first, last+1) bytes a strided tensor can touch; None when it touches none."""
    import torch

    if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.numel() == 0:
        return None
    try:
        start = t.data_ptr()
    except RuntimeError:  # no storage (tensor subclass, functional wrapper)
        return None
    lo = hi = 0
    for size, stride in zip(t.shape, t.stride()):
        if stride >= 0:
            hi += (size - 1) * stride
        else:
            lo += (size - 1) * stride
    item = t.element_size()
    return start + lo * item, start + (hi + 1) * item


def checksum(start: int, end: int) -> int:
    """adler32 of live host memory [start, end); used only on buffers we know are alive."""
    return zlib.adler32((ctypes.c_char * (end - start)).from_address(start))


class _Races:
    """Race events in first-seen order; a repeat (same ops, sites, streams) only bumps a count."""

    def __init__(self) -> None:
        self._events: dict[tuple, list] = {}

    def add(self, key: tuple, make: Callable[[], RaceEvent]) -> None:
        slot = self._events.get(key)
        if slot is None:
            self._events[key] = [make(), 1]
        else:
            slot[1] += 1

    def events(self) -> list[RaceEvent]:
        out = []
        for event, count in self._events.values():
            if count > 1:
                event = dataclasses.replace(event, what=f"{event.what} (seen {count} times)")
            out.append(event)
        return out


# ---------------------------------------------------------------------------------------------
# Pinned buffers: pure bookkeeping over the sanitizer's vector clocks (testable without a GPU)

@dataclass(eq=False)
class _Copy:
    start: int
    end: int
    stream: int
    seq: int
    writes_host: bool  # device-to-host: the copy writes the pinned bytes
    op: str
    site: tuple[str | None, int | None]
    checksum: int | None = None
    reported: bool = False
    keep: Any = None  # the storage, held only where its Python object is not preserved
    finalizer: Any = None
    dead: bool = False  # its storage died (the finalizer may run mid-iteration, from GC)

    @property
    def direction(self) -> str:
        return "D2H" if self.writes_host else "H2D"


class PinnedTracker:
    """Non-blocking copies touching pinned host bytes, kept until the host has seen them finish.

    ``syncs`` is the sanitizer's ``StreamSynchronizations``: ``host_sync_state[stream]`` is the
    last sequence number on ``stream`` the host knows finished, ``is_ordered_after`` orders one
    stream's work after another's. Entries die with their storage (a freed pinned block goes back
    to torch's caching host allocator, which itself waits for its copies before reusing it).
    """

    def __init__(self, syncs: Any, races: _Races, *, checksum_max_bytes: int = 64 << 20):
        self.syncs = syncs
        self.races = races
        self.checksum_max_bytes = checksum_max_bytes
        self.pending: list[_Copy] = []

    def _done(self, c: _Copy) -> bool:
        return self.syncs.host_sync_state.get(c.stream, -1) >= c.seq

    def _overlapping(self, start: int, end: int) -> list[_Copy]:
        return [c for c in self.pending
                if c.start < end and start < c.end and not c.dead and not self._done(c)]

    def device_access(self, start: int, end: int, *, stream: int, seq: int, writes_host: bool,
                      op: str, site: Callable[[], tuple], tensor: str, data_ptr: int,
                      pending: bool, lifetime: Any = None) -> None:
        """A copy (sequence ``seq`` on ``stream``) reading or writing pinned bytes [start, end)."""
        seen = set()  # one report per access and kind of conflict, however many copies overlap
        for c in self._overlapping(start, end):
            if not (c.writes_host or writes_host):
                continue
            if self.syncs.is_ordered_after(stream, c.seq, c.stream):
                continue
            now = site()
            c.reported = True
            direction = "D2H" if writes_host else "H2D"
            key = ("copy", op, c.op, now, c.site, stream, c.stream)
            if key in seen:
                continue
            seen.add(key)
            what = (f"{direction} copy ({op}) on stream {_fmt_stream(stream)} touches a pinned "
                    f"buffer that a non-blocking {c.direction} copy ({c.op}) on stream "
                    f"{_fmt_stream(c.stream)} may still be "
                    f"{'writing' if c.writes_host else 'reading'}; nothing orders them")
            self._add_race(key, what, tensor, data_ptr, (stream, c.stream), (op, c.op), now, c.site)
        if pending:
            entry = _Copy(start, end, stream, seq, writes_host, op, site())
            if not writes_host and end - start <= self.checksum_max_bytes:
                entry.checksum = checksum(start, end)
            self._track_lifetime(entry, lifetime)
            self.pending.append(entry)

    def _add_race(self, key, what, tensor, data_ptr, streams, ops, now, then) -> None:
        """One RaceEvent per conflict; ``now``/``then`` are the (file, line, …) of both accesses."""
        thread = threading.current_thread().name
        self.races.add(key, lambda: RaceEvent(
            kind=RACE, what=what, tensor=tensor, data_ptr=data_ptr, streams=streams, ops=ops,
            sites=(_site_str(now), _site_str(then)), filename=now[0], lineno=now[1], thread=thread))

    def host_access(self, start: int, end: int, *, write: bool, op: str,
                    site: Callable[[], tuple], tensor: str, data_ptr: int) -> None:
        """An aten op on the CPU reading (``write=False``) or writing pinned bytes [start, end)."""
        seen = set()  # one report per access and kind of conflict, however many copies overlap
        for c in self._overlapping(start, end):
            if not (c.writes_host or write):
                continue
            now = site()
            c.reported = True
            verb = "write" if write else "read"
            key = ("host", verb, op, c.op, now, c.site, c.stream)
            if key in seen:
                continue
            seen.add(key)
            what = (f"host {verb} ({op}) of a pinned buffer while a non-blocking "
                    f"{c.direction} copy ({c.op}) on stream {_fmt_stream(c.stream)} may still "
                    f"be {'writing' if c.writes_host else 'reading'} it; the host has not "
                    "synced with that copy")
            self._add_race(key, what, tensor, data_ptr, (c.stream,), (op, c.op), now, c.site)

    def host_synced(self, site: Callable[[], tuple]) -> None:
        """After a host sync: verify and forget the copies it covers."""
        if not self.pending:
            return
        keep = []
        for c in list(self.pending):
            if c.dead:
                continue
            if self._done(c):
                self._verify(c, site, "at the host sync that covers the copy")
                self._forget(c)
            else:
                keep.append(c)
        self.pending = keep

    def finish(self, site: Callable[[], tuple]) -> None:
        """At stop(): verify copies no sync covered, then drop everything."""
        for c in list(self.pending):
            if not c.dead and not self._done(c):
                self._verify(c, site, "at the end of the region, with no host sync since the copy")
            self._forget(c)
        self.pending = []

    def _verify(self, c: _Copy, site: Callable[[], tuple], when: str) -> None:
        if c.checksum is None or c.reported or checksum(c.start, c.end) == c.checksum:
            return
        c.reported = True
        now = site()
        self.races.add(
            ("unseen", c.op, now, c.site, c.stream),
            lambda: RaceEvent(
                kind=RACE,
                what=(f"host write not seen by torch (numpy view or raw pointer) changed a pinned "
                      f"buffer while a non-blocking H2D copy ({c.op}) on stream "
                      f"{_fmt_stream(c.stream)} may still have been reading it; found {when}"),
                tensor=f"pinned bytes [0x{c.start:x}, 0x{c.end:x})", data_ptr=c.start,
                streams=(c.stream,), ops=("<unseen host write>", c.op),
                sites=(_site_str(now), _site_str(c.site)), filename=now[0], lineno=now[1],
                thread=threading.current_thread().name))

    # -- lifetime ---------------------------------------------------------------------------------
    def _track_lifetime(self, entry: _Copy, tensor: Any) -> None:
        """Forget the entry when its storage dies, so a reused block is a new buffer."""
        if tensor is None:
            return
        storage = tensor.untyped_storage()
        if storage is tensor.untyped_storage():  # Python object preserved: dies with the bytes
            entry.finalizer = weakref.finalize(storage, self._drop, entry)
            entry.finalizer.atexit = False
        else:  # cannot tell when it dies: keep it alive until a sync covers the copy
            entry.keep = storage

    def _drop(self, entry: _Copy) -> None:
        entry.dead = True
        self.pending = [c for c in self.pending if c is not entry]

    @staticmethod
    def _forget(c: _Copy) -> None:
        if c.finalizer is not None:
            c.finalizer.detach()
            c.finalizer = None
        c.keep = None


# ---------------------------------------------------------------------------------------------
# Pinned buffers: which aten ops touch them (needs torch; fed to the tracker above)

class PinnedOps:
    """The aten side of the pinned-buffer check: which dispatched ops are copies between a CUDA
    tensor and a CPU one, and which CPU ops touch host bytes, told to a :class:`PinnedTracker`.

    Apart from the tracker so that the tracker stays pure bookkeeping over the vector clocks
    (tested with fake copies, no GPU), and apart from :class:`RaceDetector` so that the detector
    keeps only the lifecycle and the stream-race path of each op.
    """

    def __init__(self, tracker: PinnedTracker, sanitizer: Any, leaves: Callable[[Any], list]):
        self.tracker = tracker
        self._san, self._leaves = sanitizer, leaves

    @staticmethod
    def copy_info(name: str, args: tuple, kwargs: dict, out: Any):
        """(pinned-side tensor, copy writes it, copy is pending, its bytes) for a CUDA<->CPU copy."""
        import torch

        if name == "aten::copy_":
            dst = args[0] if args else kwargs.get("self")
            src = args[1] if len(args) > 1 else kwargs.get("src")
            non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
        else:
            src, dst = (args[0] if args else kwargs.get("self")), out
            non_blocking = kwargs.get("non_blocking", False)
        if not (isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor)):
            return None
        if dst.is_cuda and src.device.type == "cpu":
            host, writes_host = src, False
        elif src.is_cuda and dst.device.type == "cpu":
            host, writes_host = dst, True
        else:
            return None
        # non_blocking from pageable memory returns only once the host buffer is safe to reuse
        pending = bool(non_blocking) and _is_pinned(host)
        return host, writes_host, pending, byte_range(host)

    def copy(self, info: tuple, *, stream: int, seq: int, op: str) -> None:
        """A launched copy (``copy_info``'s answer): checked, and tracked while it is pending."""
        host, writes_host, pending, rng = info
        if rng is not None and (pending or self.tracker.pending):
            self.tracker.device_access(
                *rng, stream=stream, seq=seq, writes_host=writes_host, op=op, site=_here,
                tensor=describe(host), data_ptr=host.data_ptr(), pending=pending, lifetime=host)

    def host_op(self, schema, name: str, args: tuple, kwargs: dict, is_factory: bool) -> None:
        """A CPU op: every tensor argument it reads or writes, checked against pending copies."""
        import torch

        for argument, value in self._san.zip_arguments(schema, args, kwargs):
            alias = argument.alias_info
            write = alias is not None and alias.is_write
            if not write and (is_factory or alias is not None):
                continue  # a view or a factory reads metadata only
            for t in self._leaves(value):
                if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                    rng = byte_range(t)
                    if rng is not None:
                        self.tracker.host_access(*rng, write=write, op=name, site=_here,
                                                 tensor=describe(t), data_ptr=t.data_ptr())


# ---------------------------------------------------------------------------------------------
# Process-global machinery: trace callbacks registered once, gated by the set of live detectors

#: races=True leaves a lasting hook: torch cannot deactivate its CUDA trace once activated
LASTING_NOTE = ("races: torch's CUDA trace (torch.cuda._gpu_trace) is now active for the rest of "
                "this process and cannot be undone; syncguard's callbacks stay registered, "
                "gated off outside race regions")


class _Hub:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.detectors: tuple["RaceDetector", ...] = ()
        self.installed = False
        self._query_saved: list[tuple[type, Any, Any]] = []

    def add(self, det: "RaceDetector") -> None:
        with self.lock:
            if not self.installed:
                self._install()
                self.installed = True
            if not self.detectors:
                self._patch_query()
            self.detectors = self.detectors + (det,)

    def remove(self, det: "RaceDetector") -> None:
        with self.lock:
            if not any(d is det for d in self.detectors):
                return
            self.detectors = tuple(d for d in self.detectors if d is not det)
            if not self.detectors:
                self._unpatch_query()

    def fire(self, method: str, sync: bool, args: tuple) -> None:
        for d in self.detectors:
            d._on_trace(method, sync, args)

    def _install(self) -> None:
        import torch
        import torch.cuda._gpu_trace as gpu_trace
        import torch.cuda._sanitizer as sanitizer  # registers the stock sanitizer's callbacks

        _gate_stock_sanitizer(sanitizer, gpu_trace)
        torch._C._activate_gpu_trace()
        for register, method, sync in _TRACE:
            getattr(gpu_trace, register)(
                lambda *a, _m=method, _s=sync: self.fire(_m, _s, a) if self.detectors else None)

    def _patch_query(self) -> None:
        """``query()`` returning True is a host observation of completion; the trace misses it."""
        import torch

        for cls, attr, method in ((torch.cuda.Event, "cuda_event", "_handle_event_synchronization"),
                                  (torch.cuda.Stream, "cuda_stream", "_handle_stream_synchronization")):
            original = cls.__dict__.get("query")
            if original is None:
                continue

            def query(obj, _orig=original, _attr=attr, _method=method):
                done = _orig(obj)
                if done:
                    handle = getattr(obj, _attr, None)
                    if handle is not None:
                        self.fire(_method, True, (handle,))
                return done

            query.__doc__ = original.__doc__
            query.__wrapped__ = original
            cls.query = query
            self._query_saved.append((cls, original, query))

    def _unpatch_query(self) -> None:
        for cls, original, ours in self._query_saved:
            if cls.__dict__.get("query") is ours:  # someone patched over us: leave theirs
                cls.query = original
        self._query_saved = []


def _gate_stock_sanitizer(sanitizer: Any, gpu_trace: Any) -> None:
    """Make torch's own (disabled) sanitizer's callbacks do nothing until it is enabled."""
    stock = getattr(sanitizer, "cuda_sanitizer", None)
    handler = getattr(getattr(stock, "dispatch", None), "event_handler", None)
    if handler is None:
        return
    for registry in vars(gpu_trace).values():
        callbacks = getattr(registry, "callback_list", None)
        if not isinstance(callbacks, list):
            continue
        for i, cb in enumerate(callbacks):
            if getattr(cb, "__self__", None) is handler:
                def gated(*a, _cb=cb):
                    if stock.enabled:
                        _cb(*a)
                gated._syncguard_gated = cb  # type: ignore[attr-defined]
                callbacks[i] = gated


_HUB = _Hub()
_MODE_CLS: Any = None


def _mode_for(det: "RaceDetector") -> Any:
    global _MODE_CLS
    if _MODE_CLS is None:
        from torch.utils._python_dispatch import TorchDispatchMode

        class RaceMode(TorchDispatchMode):
            """Hands every op on this thread to its detector; a pass-through once stopped."""

            def __init__(self, detector: "RaceDetector"):
                super().__init__()
                self.detector = detector

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return self.detector._dispatch(func, args, kwargs or {})

        _MODE_CLS = RaceMode
    return _MODE_CLS(det)


def _handler_class(sanitizer: Any) -> type:
    class Handler(sanitizer.EventHandler):
        """The sanitizer's handler without a stack capture per allocation (we never report it)."""

        def _handle_memory_allocation(self, data_ptr: int) -> None:
            self.tensors_accessed.ensure_tensor_does_not_exist(data_ptr)
            self.tensors_accessed.create_tensor(data_ptr, None)

    return Handler


# ---------------------------------------------------------------------------------------------

class RaceDetector:
    """Finds stream races and pinned-buffer races in the ops run between start() and stop().

    The trace callbacks behind it are process-global and cannot be removed once registered
    (``torch._C._activate_gpu_trace()`` is irreversible), so they are registered once and gated by
    the set of running detectors; see the module docstring for the cost that remains. Without
    CUDA, start() and stop() do nothing and stop() returns ``[]`` (``reason`` says why).
    """

    def __init__(self, *, checksum_max_bytes: int = 64 << 20, _assume_cuda: bool = False):
        if not isinstance(checksum_max_bytes, int) or checksum_max_bytes < 0:
            raise ValueError(f"RaceDetector(checksum_max_bytes=...) must be an int >= 0, "
                             f"got {checksum_max_bytes!r}")
        self.checksum_max_bytes = checksum_max_bytes
        self._assume_cuda = _assume_cuda  # CPU plumbing tests only: run the machinery anyway
        self.reason: str | None = None
        self.notes: list[str] = []
        self._running = False
        self._active = False
        self._result: list[RaceEvent] = []
        self._mode = None
        self._lock = threading.RLock()

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        if self._running:
            raise RuntimeError("RaceDetector.start() called twice; call stop() first")
        self._running, self._result, self.reason = True, [], None
        self._races = _Races()
        try:
            import torch
        except ImportError:
            self.reason = "torch is not installed"
            return
        if not (self._assume_cuda or torch.cuda.is_available()):
            self.reason = f"CUDA is not available (torch {torch.__version__}); races not checked"
            return
        import torch.cuda._sanitizer as sanitizer
        from torch.utils import _pytree

        self._san, self._leaves = sanitizer, _pytree.tree_leaves
        self._record_stream = torch.ops.aten.record_stream.default
        self._handler = _handler_class(sanitizer)()
        self._tracker = PinnedTracker(self._handler.syncs, self._races,
                                      checksum_max_bytes=self.checksum_max_bytes)
        self._pinned = PinnedOps(self._tracker, sanitizer, self._leaves)
        self._op_thread: int | None = None  # the thread inside an op we are dispatching
        self._op_syncs: list[tuple[str, tuple]] = []
        self._captured = 0  # ops captured into a CUDA graph, not checked
        try:
            first = not _HUB.installed
            _HUB.add(self)
            if first:  # said once, by the region that did it (issue 12 item 3)
                self.notes.append(LASTING_NOTE)
            self._mode = _mode_for(self)
            self._mode.__enter__()
        except BaseException:
            _HUB.remove(self)
            self._mode, self._running = None, False
            raise
        self._active = True

    def stop(self) -> list[RaceEvent]:
        """Pop the mode, ungate the callbacks, return the races; a second call returns the same."""
        if not self._running:
            return list(self._result)
        self._running = False
        if not self._active:
            return []
        self._active = False
        errors: list[BaseException] = []
        for step in (self._pop_mode, lambda: _HUB.remove(self), self._finish_tracker):
            try:
                step()
            except BaseException as e:  # keep restoring; re-raise the first failure after
                errors.append(e)
        self._result = self._races.events()
        self._handler = None
        if self._captured:
            self._note(f"race detector: {self._captured} op(s) captured into a CUDA graph were not "
                       "checked (they run at replay, which it does not see)")
        if errors:
            raise errors[0]
        return list(self._result)

    def __enter__(self) -> "RaceDetector":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _pop_mode(self) -> None:
        from torch.utils import _python_dispatch as pd

        mode, self._mode = self._mode, None
        if mode is None:
            return
        stack = pd._get_current_dispatch_mode_stack()
        if not any(m is mode for m in stack):
            self.notes.append("race detector stopped on another thread than it started on; "
                              "its dispatch mode stays there as a pass-through")
            return
        above = []
        while pd._get_current_dispatch_mode_stack()[-1] is not mode:
            above.append(pd._pop_mode())
        mode.__exit__(None, None, None)
        for m in reversed(above):
            pd._push_mode(m)

    def _note(self, text: str) -> None:
        if len(self.notes) < 20:  # a failure in a loop must not grow without bound
            self.notes.append(text)

    def _finish_tracker(self) -> None:
        with self._lock:
            self._tracker.finish(_here)

    # -- observations -----------------------------------------------------------------------------
    def _on_trace(self, method: str, sync: bool, args: tuple) -> None:
        """A ``_gpu_trace`` callback (from any thread) or an observed query() == True."""
        if not self._active:
            return
        with self._lock:
            handler = self._handler
            if handler is None:
                return
            try:
                getattr(handler, method)(*args)
                if sync:
                    if self._op_thread == threading.get_ident():
                        self._op_syncs.append((method, args))
                    self._tracker.host_synced(_here)
            except Exception as e:  # never break the user's CUDA call
                self._note(f"race detector: {method}{args} failed: {e!r}")

    def _dispatch(self, func, args: tuple, kwargs: dict):
        if not self._active or func is self._record_stream:
            return func(*args, **kwargs)
        san = self._san
        schema = func._schema
        name = schema.name
        is_factory = bool(san.FACTORY_FUNCTION_REGEX.match(name))
        argh = san.ArgumentHandler()
        argh.parse_inputs(schema, args, kwargs, is_factory=is_factory)
        outer, self._op_thread, self._op_syncs = self._op_thread, threading.get_ident(), []
        try:
            out = func(*args, **kwargs)
        finally:
            self._op_thread = outer
        synced, self._op_syncs = self._op_syncs, []
        argh.parse_outputs(schema, out, is_factory=is_factory)
        written = argh.dataptrs_written
        read = argh.dataptrs_read - written
        launched = bool(read or written)
        if launched and _capturing():
            # Captured into a CUDA graph: nothing ran yet. Its accesses happen at each replay,
            # which is no aten op and which this detector does not see; recording them now, on
            # the capture stream, would report races with work that is ordered in fact.
            self._captured += 1
            return out
        # torch calls (stream, is_pinned) stay outside the lock: a trace callback from a thread that
        # holds an allocator mutex may be waiting for it.
        stream = _current_stream() if launched else None
        copy = (PinnedOps.copy_info(name, args, kwargs, out) if launched and name in _COPY_OPS
                else None)
        with self._lock:
            if self._handler is None:  # stopped meanwhile
                return out
            if launched:
                errors = self._handler._handle_kernel_launch(
                    stream, read, written, argh.outputs, schema, argh.tensor_aliases)
                seq = self._handler.seq_num
                if errors:
                    self._stream_races(errors, args, kwargs, out)
                if synced and name in _SYNC_AT_END:
                    for method, a in synced:
                        getattr(self._handler, method)(*a)
                    self._tracker.host_synced(_here)
                if copy is not None:
                    self._pinned.copy(copy, stream=stream, seq=seq, op=name)
            if copy is None and self._tracker.pending and name not in _METADATA_OPS:
                self._pinned.host_op(schema, name, args, kwargs, is_factory)
        return out

    # -- stream races (pinned-buffer races: PinnedOps) ----------------------------------------------
    def _stream_races(self, errors: list, args, kwargs, out) -> None:
        import torch

        tensors = {}
        for t in self._leaves((args, kwargs, out)):
            if isinstance(t, torch.Tensor) and t.is_cuda:
                tensors.setdefault(t.data_ptr() or id(t), t)
        for err in errors:
            cur, prev = getattr(err, "current_access", None), getattr(err, "previous_access", None)
            if cur is None or prev is None:
                self._note(f"race detector: unexpected sanitizer error {err!r}")
                continue
            self._races.add(*stream_race_event(err, tensors.get(err.data_ptr)))


def stream_race_event(err: Any, tensor: Any = None) -> tuple[tuple, Callable[[], RaceEvent]]:
    """(dedup key, RaceEvent factory) for a sanitizer ``UnsynchronizedAccessError``."""
    cur, prev = err.current_access, err.previous_access
    op_now, op_before = _op_name(cur.operator), _op_name(prev.operator)
    now, before = frames_site(cur.stack_trace), frames_site(prev.stack_trace)
    kind_now, kind_before = cur.type.name.lower(), prev.type.name.lower()
    key = ("stream", kind_now, kind_before, op_now, op_before, now, before, cur.stream, prev.stream)

    def make() -> RaceEvent:
        return RaceEvent(
            kind=RACE,
            what=(f"{kind_now} on stream {_fmt_stream(cur.stream)} ({op_now}) is not ordered after "
                  f"the {kind_before} on stream {_fmt_stream(prev.stream)} ({op_before}); "
                  "add wait_stream / an event wait between them"),
            tensor=describe(tensor, err.data_ptr), data_ptr=err.data_ptr,
            streams=(cur.stream, prev.stream), ops=(op_now, op_before),
            sites=(_site_str(now), _site_str(before)), filename=now[0], lineno=now[1],
            thread=threading.current_thread().name)

    return key, make


def _op_name(operator: Any) -> str:
    name = getattr(operator, "name", None)
    return name if isinstance(name, str) else str(operator).split("(")[0]


def _is_pinned(t: Any) -> bool:
    try:
        return bool(t.is_pinned())
    except RuntimeError:
        return False


def _capturing() -> bool:
    """Whether the current stream is capturing a CUDA graph (``cudaStreamIsCapturing``: one of
    the few CUDA calls that are legal during a capture)."""
    import torch

    return torch.cuda.is_current_stream_capturing()


def _current_stream() -> int:
    import torch

    return torch.cuda.current_stream().cuda_stream
