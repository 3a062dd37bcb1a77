"""Pageable or pinned: how the cuda detector tells, for an async host<->device copy.

It matters only for an async copy that no stream sync follows: CUDA stages pageable memory
synchronously (the host waits), pinned memory not. The CUPTI callback cannot ask (a CUDA call in
a callback hung the process, NOTES), so the answer comes later, outside every callback:

* ``pointer`` (default): ``cudaPointerGetAttributes`` on the copy's host pointer when the region
  exits, on the region's thread, through the libcudart torch loaded. Skipped while that thread's
  current stream captures a graph. A pinned block freed with ``cudaFreeHost`` before the region
  exits would read as pageable; torch's host allocator keeps its blocks cached, so this needs an
  explicit ``torch.cuda.empty_host_cache()`` (or a user's own ``cudaFreeHost``) inside the region.
* ``activity``: CUPTI's MEMCPY activity records (``srcKind``/``dstKind``), matched by
  correlation id and flushed at region exit. Exact, no CUDA call at all, but measured costlier.

Both agree with the profiler's runtime trace on the ops checked on a GPU.

The same two sources name the direction of a copy whose call does not (``cudaMemcpyDefault``, the
driver's unified ``cuMemcpy``/``cuMemcpyAsync``): the activity record's ``copyKind``, or the two
pointers' memory types. A copy that neither names is counted in a note, never dropped silently.
``combine`` reads either source through one small interface: :class:`ByCorrelation` (activity
records) or :class:`ByPointer` (what :func:`pointer_kinds` asked).
"""
from __future__ import annotations

import ctypes
import sys
import threading

from syncguard.detectors.cuda import cupti as C

COPY = "copy"


class ActivityRecords:
    """CUPTI MEMCPY activity records by correlation id, collected while enabled."""

    def __init__(self) -> None:
        self.records: dict[int, tuple[int, int, int]] = {}  # correlation id -> copy, src, dst kinds
        self.on = False
        self.errors = 0
        self._lock = threading.Lock()
        self._buffers: dict[int, object] = {}
        self._registered = False
        self._lib = None
        self._req = C.BUFFER_REQUESTED(self._buffer_requested)
        self._done = C.BUFFER_COMPLETED(self._buffer_completed)

    def enable(self, lib) -> None:
        """Register (once per process: CUPTI keeps one pair of buffer callbacks) and enable."""
        self._lib = lib
        if not self._registered:
            lib.check(lib.lib.cuptiActivityRegisterCallbacks(self._req, self._done),
                      "cuptiActivityRegisterCallbacks")
            self._registered = True
        lib.check(lib.lib.cuptiActivityEnable(C.ACTIVITY_KIND_MEMCPY), "cuptiActivityEnable")
        self.on = True

    def flush(self) -> None:
        if self.on:
            self._lib.lib.cuptiActivityFlushAll(C.ACTIVITY_FLAG_FLUSH_FORCED)

    def disable(self) -> None:
        if self.on:
            self.on = False
            self._lib.lib.cuptiActivityDisable(C.ACTIVITY_KIND_MEMCPY)
            self._lib.lib.cuptiActivityFlushAll(C.ACTIVITY_FLAG_FLUSH_FORCED)

    def _buffer_requested(self, buf_pp, size_p, max_p) -> None:
        try:
            size = 1 << 20
            buf = ctypes.create_string_buffer(size + 8)
            addr = (ctypes.addressof(buf) + 7) & ~7  # CUPTI wants 8-byte aligned buffers
            with self._lock:
                self._buffers[addr] = buf
            buf_pp[0], size_p[0], max_p[0] = addr, size, 0
        except BaseException:
            self.errors += 1
            buf_pp[0], size_p[0] = None, 0

    def _buffer_completed(self, ctx, stream_id, buf, size, valid) -> None:
        try:
            rec = ctypes.c_void_p()
            while self._lib.lib.cuptiActivityGetNextRecord(buf, valid, ctypes.byref(rec)) == C.SUCCESS:
                head = C.ActivityMemcpyHead.from_address(rec.value)
                if head.kind == C.ACTIVITY_KIND_MEMCPY:
                    kinds = (head.copyKind, head.srcKind, head.dstKind)
                    self.records[head.correlationId] = kinds
                    if head.runtimeCorrelationId:
                        self.records[head.runtimeCorrelationId] = kinds
        except BaseException:
            self.errors += 1
        finally:
            with self._lock:
                self._buffers.pop(buf, None)


class _PointerAttributes(ctypes.Structure):
    # newer runtimes append reserved words: room for them, never a write past our buffer
    _fields_ = [("type", ctypes.c_int), ("device", ctypes.c_int),
                ("devicePointer", ctypes.c_void_p), ("hostPointer", ctypes.c_void_p),
                ("reserved", ctypes.c_long * 16)]


_cudart = None


def _load_cudart():
    """The libcudart torch mapped (so the same runtime answers), for cudaPointerGetAttributes."""
    global _cudart
    if _cudart is None:
        lib = ctypes.CDLL(C.mapped_library("libcudart.so") or "libcudart.so")
        lib.cudaPointerGetAttributes.argtypes = [ctypes.POINTER(_PointerAttributes), ctypes.c_void_p]
        _cudart = lib
    return _cudart


_ADDRESSES: dict = {}  # id(libcudart) -> (lib, its two functions' addresses)


def _addresses(lib) -> tuple[int, int]:
    """cudaPointerGetAttributes' and cudaGetLastError's addresses, for the C batch (a
    ctypes.cast per region exit cost more than the query itself)."""
    hit = _ADDRESSES.get(id(lib))
    if hit is None or hit[0] is not lib:
        hit = _ADDRESSES[id(lib)] = (lib, (
            ctypes.cast(lib.cudaPointerGetAttributes, ctypes.c_void_p).value,
            ctypes.cast(lib.cudaGetLastError, ctypes.c_void_p).value))
    return hit[1]


#: cudaPointerGetAttributes' memory type -> CUPTI's memory kind (unregistered host memory is
#: pageable; registered host memory pinned)
_KIND_OF_TYPE = {0: 1, 1: 2, 2: 3, 3: 5}
_HOST_KINDS = (1, 2)
_MEMORY_KIND = C.MEMORY_KIND
_H2D, _D2H = "h2d", "d2h"


class ByCorrelation:
    """What CUPTI's MEMCPY activity records say of a region's copies, by correlation id:
    (copy kind, source memory kind, destination memory kind), as cupti_activity.h numbers them."""

    def __init__(self, records: dict) -> None:
        self.records = records

    def _record(self, call):
        for cid in call.correlation:
            rec = self.records.get(cid)
            if rec:
                return rec
        return None

    def host_kind(self, call, direction: str) -> str | None:
        """pageable / pinned / ... for the host side of a copy, or None when no record says."""
        rec = self._record(call)
        return C.MEMORY_KIND.get(rec[1] if direction == _H2D else rec[2]) if rec else None

    def direction(self, call) -> str | None:
        """The call's own direction, else the record's copyKind (cudaMemcpyDefault)."""
        if call.direction:
            return call.direction
        rec = self._record(call)
        return C.COPY_KIND.get(rec[0]) if rec else None


class ByPointer:
    """What the runtime says of the pointers a region's copies used: pointer -> CUPTI memory
    kind (a failed query leaves its pointer out). A region's copies reuse few pointers (a loop's
    copies: one pinned block), so the copies are judged by pointer, not one by one.

    ``ask(pointers) -> kinds`` (each None when nothing says): asks the runtime for pointers the
    first time a copy needs them, once per pointer, so the region's exit makes one pass over its
    copies (combine's), not a Python pass of its own to collect the pointers first, which is
    costly at a region's exit with caches cold. With the C module the exit asks in C by the same
    rules (``_cuptifast.by_pointer``); this class serves the Python path. Without ``ask`` only
    ``kinds`` is known."""

    def __init__(self, kinds: dict | None = None, ask=None) -> None:
        self.kinds = dict(kinds or {})
        self._names = {p: C.MEMORY_KIND.get(k) for p, k in self.kinds.items()}
        self._ask = ask

    # Plain loops, not comprehensions, in _learn (and pointer_kinds' ask): they run
    # once per region exit with caches cold, where each comprehension's own frame is a cost.
    def _learn(self, ptrs) -> None:
        """Ask for ``ptrs`` (none asked before, each once) and name each: None when nothing says."""
        kinds, names = self.kinds, self._names
        if self._ask is not None:
            asked = []
            for ptr in ptrs:
                if ptr:
                    asked.append(ptr)
            if asked:
                for ptr, kind in zip(asked, self._ask(asked)):
                    if kind is not None:
                        kinds[ptr] = kind
        for ptr in ptrs:
            names[ptr] = _MEMORY_KIND.get(kinds.get(ptr))

    def host_kind(self, call, direction: str) -> str | None:
        ptr = call.src if direction == _H2D else call.dst
        try:
            return self._names[ptr]
        except KeyError:
            self._learn((ptr,))
            return self._names[ptr]

    def direction(self, call) -> str | None:
        """The call's own direction, else which side of it is host memory (cudaMemcpyDefault,
        the driver's unified cuMemcpy)."""
        if call.direction:
            return call.direction
        if not (call.src and call.dst):
            return None
        new = [p for p in dict.fromkeys((call.src, call.dst)) if p not in self._names]
        if new:
            self._learn(new)
        src, dst = self.kinds.get(call.src), self.kinds.get(call.dst)
        if src is None or dst is None:
            return None
        from_host, to_host = src in _HOST_KINDS, dst in _HOST_KINDS
        return ("h2h" if to_host else _H2D) if from_host else (_D2H if to_host else "d2d")


def _runtime():
    """The libcudart torch loaded, or None when nothing may be asked of it now: the thread's
    current stream captures a graph, or there is no runtime. (torch from sys.modules: this runs
    at region exit with caches cold, where an import statement is not free.)"""
    torch = sys.modules.get("torch")
    try:
        return None if torch is None or torch.cuda.is_current_stream_capturing() else _load_cudart()
    except Exception:
        return None


def pointer_functions() -> tuple[int, int] | None:
    """cudaPointerGetAttributes' and cudaGetLastError's addresses for ``_cuptifast.by_pointer``,
    which calls this once, at a region's first question; None: nothing may be asked now."""
    lib = _runtime()
    return None if lib is None else _addresses(lib)


def pointer_kinds(fast=None) -> ByPointer:
    """The memory kinds of the pointers that two kinds of copy need, asked of the runtime when a
    copy first needs one, as the region exits (no callback is running then), on its thread:

    * an async host<->device copy: is its host memory pageable or pinned;
    * a copy whose call does not say its direction (``cudaMemcpyDefault``, the driver's unified
      ``cuMemcpy``): which side is the host's, and its memory.

    Nothing is asked while the thread's current stream captures a graph (checked once, at the
    first question). ``fast``: the C callback's module, which asks a batch of pointers in one call
    without a ctypes call per pointer. The exit's own path with
    the C module asks in C (``_cuptifast.by_pointer``, with :func:`pointer_functions`)."""
    state: dict = {}

    def ask(ptrs) -> list:
        if "lib" not in state:
            state["lib"] = _runtime()
        lib = state["lib"]
        if lib is None:
            return [None] * len(ptrs)
        if fast is not None:
            mem_types = fast.pointer_types(*_addresses(lib), ptrs)
        else:
            mem_types = [_pointer_type(lib, ptr) for ptr in ptrs]
        kinds = []
        for t in mem_types:  # -1: failed, says nothing
            kinds.append(_KIND_OF_TYPE.get(t, 0) if t >= 0 else None)
        return kinds

    return ByPointer(ask=ask)


def _pointer_type(lib, ptr) -> int:
    """cudaPointerGetAttributes' memory type of ``ptr`` through ctypes; -1 when it failed."""
    attr = _PointerAttributes()
    if lib.cudaPointerGetAttributes(ctypes.byref(attr), ptr) != 0:
        lib.cudaGetLastError()  # leave no error behind for torch's next launch check
        return -1
    return attr.type
