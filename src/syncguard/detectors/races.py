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

import threading
from typing import Any, Callable

from syncguard.detectors.pinned import (PinnedOps, PinnedTracker, _fmt_stream, _here, _Races, _site_str, describe,
                                        frames_site)
from syncguard.records.events import RACE, RaceEvent

__all__ = ["RaceDetector", "stream_race_event"]

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
            if first:  # said once, by the region that did it
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


def _capturing() -> bool:
    """Whether the current stream is capturing a CUDA graph (``cudaStreamIsCapturing``: one of
    the few CUDA calls that are legal during a capture)."""
    import torch

    return torch.cuda.is_current_stream_capturing()


def _current_stream() -> int:
    import torch

    return torch.cuda.current_stream().cuda_stream
