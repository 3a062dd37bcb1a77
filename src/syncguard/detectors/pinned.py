"""Pinned-buffer races: the host touching pinned bytes that a non-blocking copy may still be using.

:class:`PinnedTracker` keeps every non-blocking copy between a CUDA tensor and pinned host bytes
until the host has observed a sync that covers it, by the sanitizer's vector clocks alone (pure
bookkeeping, tested with fake copies); :class:`PinnedOps` tells it which dispatched aten ops are
such copies and which CPU ops touch host bytes. Also the small helpers both race checks share
(how a tensor, a stream and a site are named in a race). :mod:`syncguard.detectors.races` runs
both checks; its docstring says how detection stays deterministic.
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

__all__ = ["PinnedTracker", "PinnedOps", "byte_range", "describe", "frames_site"]


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


def _is_pinned(t: Any) -> bool:
    try:
        return bool(t.is_pinned())
    except RuntimeError:
        return False
