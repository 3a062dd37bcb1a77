"""Variant 6's machinery: the row map computed on the device, in the scatter kernel itself.

Variant 5 (``triton_row_scatter``) computes the destination rows on the host from the CPU mask
(``np.flatnonzero``, a cast into a freshly allocated pinned buffer) and sends them to the
device. This module sends the mask instead, and lets one Triton kernel turn it into rows:

1. the mask's bytes are copied into a free slot of a ring (``PinnedRing``): a page-locked host
   buffer and a device buffer, reused only once the kernel that last read them has completed
   (``cudaEventQuery``, which never waits; when every slot is in flight a new one is added,
   so the host never waits either);
2. one non-blocking H2D copy moves them to the slot's device buffer, by default on a side
   stream that the merge's stream then waits for on the device (``COPY_ON_SIDE_STREAM``): the
   copy overlaps earlier GPU work instead of running in line ahead of the kernel;
3. one kernel (``_device_rows_kernel``), grid = (token splits, hidden blocks): each program
   counts the multimodal tokens before its split (reading the mask's prefix, a few KiB from
   L2), then walks its tokens in chunks, turning each chunk's mask into source rows with an
   in-register prefix sum plus the running count, and copies those rows.

``row_map`` computes the same source rows with torch on the CPU, by the same decomposition
(splits, chunks, carries), so the arithmetic the kernel relies on is tested without a GPU; the
CPU fallback of the variant uses it.

Nothing here reads device memory on the host: no ``.item()``, no ``nonzero``, no size taken
from device data. Triton is imported on first CUDA use only.
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any, Callable

import torch

try:
    import numpy as _np
except ImportError:  # torch runs without numpy; staging then copies with torch
    _np = None

__all__ = ["DeviceRowsConfig", "device_rows_config", "row_map", "PinnedRing", "scatter",
           "Staged", "stage", "release", "launch", "kernel", "COPY_ON_SIDE_STREAM",
           "scatter_cpu", "cache_key", "cached_states", "jit_with_triton", "next_pow2"]

tl: Any = None  # triton.language, bound by jit_with_triton(); the kernels read it as a global
copy_tile: Any = None  # the jitted _copy_tile, bound by jit_with_triton()
_KERNEL: dict[str, Any] = {}
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
SCAN = 4096  # mask bytes per iteration of the prefix count


def _device_rows_kernel(src_ptr, mask_ptr, dst_ptr, n_tokens, hidden, tokens_per_split,
                        src_stride_r, src_stride_h, dst_stride_r, dst_stride_h,
                        CHUNK: tl.constexpr, BLOCK_H: tl.constexpr, SCAN_BLOCK: tl.constexpr,
                        UNIT_H: tl.constexpr):
    """For every token t of this program's split with mask[t]: dst[t, h] = src[rows before t,
    h], for this program's BLOCK_H columns. Offsets are int64; counts int32 (tokens < 2**31)."""
    pid_s = tl.program_id(0)
    pid_h = tl.program_id(1)
    start = pid_s * tokens_per_split
    end = tl.minimum(start + tokens_per_split, n_tokens)
    # multimodal tokens before this split
    carry = tl.sum(tl.zeros([SCAN_BLOCK], dtype=tl.int32), axis=0)
    for t0 in range(0, start, SCAN_BLOCK):
        t = t0 + tl.arange(0, SCAN_BLOCK)
        carry += tl.sum(tl.load(mask_ptr + t, mask=t < start, other=0).to(tl.int32), axis=0)
    h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    h_ok = h < hidden
    for t0 in range(start, end, CHUNK):
        t = t0 + tl.arange(0, CHUNK)
        m = tl.load(mask_ptr + t, mask=t < end, other=0).to(tl.int32)
        src_r = (carry + tl.cumsum(m, axis=0) - 1).to(tl.int64)
        carry += tl.sum(m, axis=0)
        copy_tile(src_ptr, dst_ptr, src_r, t.to(tl.int64), h, (m != 0)[:, None] & h_ok[None, :],
                  src_stride_r, src_stride_h, dst_stride_r, dst_stride_h, UNIT_H)


def _copy_tile(src_ptr, dst_ptr, src_r, dst_r, h, ok, src_stride_r, src_stride_h, dst_stride_r,
               dst_stride_h, UNIT_H: tl.constexpr):
    """dst[dst_r, h] = src[src_r, h] where ``ok``: the tile copy both Triton kernels end with
    (int64 row offsets; UNIT_H, both hidden strides 1, lets loads vectorise)."""
    if UNIT_H:
        src_off = src_r[:, None] * src_stride_r + h[None, :]
        dst_off = dst_r[:, None] * dst_stride_r + h[None, :]
    else:
        h64 = h.to(tl.int64)
        src_off = src_r[:, None] * src_stride_r + h64[None, :] * src_stride_h
        dst_off = dst_r[:, None] * dst_stride_r + h64[None, :] * dst_stride_h
    vals = tl.load(src_ptr + src_off, mask=ok)
    tl.store(dst_ptr + dst_off, vals, mask=ok)


def jit_with_triton(fn: Callable) -> tuple[Any, Any]:
    """``(triton, triton.jit(fn))``, with ``triton.language`` bound as ``tl`` and the jitted
    ``_copy_tile`` as ``copy_tile`` in ``fn``'s module first: the kernel bodies read both as
    globals, and triton is imported only here, on first CUDA use (CPU machines do not have
    it). Shared by both Triton variants."""
    import triton
    import triton.language as language

    if "copy_tile" not in _KERNEL:
        globals()["tl"] = language
        _KERNEL["copy_tile"] = triton.jit(_copy_tile)
    fn.__globals__["tl"] = language
    fn.__globals__["copy_tile"] = _KERNEL["copy_tile"]
    return triton, triton.jit(fn)


def kernel():
    """The jitted kernel (imports triton on first use)."""
    if "kernel" not in _KERNEL:  # not "if not _KERNEL": jit_with_triton stores copy_tile there
        _KERNEL["triton"], _KERNEL["kernel"] = jit_with_triton(_device_rows_kernel)
    return _KERNEL["kernel"]


# ---------------------------------------------------------------------------------------------
# Launch geometry (pure Python: tested on the CPU)

@dataclass(frozen=True)
class DeviceRowsConfig:
    """One launch: ``splits`` x ``h_blocks`` programs, each copying ``chunk`` tokens x
    ``block_h`` columns per iteration over ``tokens_per_split`` tokens (a multiple of
    ``chunk``, so chunks never straddle two programs)."""

    chunk: int
    block_h: int
    tokens_per_split: int
    splits: int
    h_blocks: int
    num_warps: int

    @property
    def grid(self) -> tuple[int, int]:
        return self.splits, self.h_blocks


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@functools.lru_cache(maxsize=256)
def device_rows_config(tokens: int, hidden: int, element_size: int,
                       programs: int = 528) -> DeviceRowsConfig:
    """About 16 KiB per iteration (at most 512 columns: a program's row segment is 1 KiB of
    bf16, wide enough to coalesce, narrow enough to leave rows for the chunk), at least 16
    tokens per chunk, and about ``programs`` programs (4 per SM of an H200's 132) so that every
    SM has copies in flight. Cached: the per-call cost is one dict lookup."""
    if tokens < 1 or hidden < 1 or element_size not in _INT_OF_SIZE:
        raise ValueError(f"device_rows_config: need tokens >= 1, hidden >= 1 and an element "
                         f"size in {sorted(_INT_OF_SIZE)}, got {tokens}, {hidden}, {element_size}")
    tile = 16384 // element_size
    block_h = min(max(16, next_pow2(hidden)), 512, tile // 16)
    chunk = max(16, tile // block_h)
    h_blocks = _cdiv(hidden, block_h)
    want_splits = max(1, min(_cdiv(programs, h_blocks), _cdiv(tokens, chunk)))
    tokens_per_split = _cdiv(_cdiv(tokens, want_splits), chunk) * chunk
    splits = _cdiv(tokens, tokens_per_split)
    num_warps = 8 if chunk * block_h * element_size >= 8192 else 4
    return DeviceRowsConfig(chunk, block_h, tokens_per_split, splits, h_blocks, num_warps)


def row_map(mask: torch.Tensor, cfg: DeviceRowsConfig) -> torch.Tensor:
    """The source row the kernel reads for each token (-1 where the mask is off), computed
    the kernel's way: per split, the count of earlier multimodal tokens (the prefix loop);
    per chunk, the running count plus an inclusive prefix sum inside the chunk. int64, CPU."""
    n = mask.shape[0]
    m = torch.zeros(cfg.splits * cfg.tokens_per_split, dtype=torch.int64)
    m[:n] = mask.to(torch.int64)
    per_chunk = m.view(cfg.splits, cfg.tokens_per_split // cfg.chunk, cfg.chunk)
    chunk_sums = per_chunk.sum(-1)
    split_sums = chunk_sums.sum(-1)
    before_split = torch.cumsum(split_sums, 0) - split_sums             # the prefix loop
    before_chunk = torch.cumsum(chunk_sums, 1) - chunk_sums             # the carry
    src = (before_split[:, None, None] + before_chunk[:, :, None]
           + torch.cumsum(per_chunk, -1) - 1).reshape(-1)[:n]
    return torch.where(mask, src, torch.full_like(src, -1))


def scatter_cpu(src: torch.Tensor, mask: torch.Tensor, dst: torch.Tensor) -> None:
    """The CPU fallback: ``row_map``'s rows, copied as same-width integers (bit copy, every
    dtype, as the kernel does)."""
    n, hidden = dst.shape
    cfg = device_rows_config(n, hidden, dst.element_size())
    rows = row_map(mask, cfg)
    as_int = _INT_OF_SIZE[dst.element_size()]
    d, s = dst.view(as_int), src.view(as_int)
    d[mask] = s[rows[mask]]


# ---------------------------------------------------------------------------------------------
# Host staging and per-stream device buffers

class _Slot:
    """A pinned host buffer and a device buffer for one mask, and the events that say when
    they may be reused: ``event`` is recorded on the merge's stream after the kernel that read
    them (the kernel itself waited for the copy), ``copied`` on the copy stream after the copy.
    ``busy`` covers the time between ``take`` and that record. ``fresh``: the device buffer
    was just allocated, on the merge's stream, whose earlier work may still use that memory
    (the caching allocator reuses blocks in that stream's order; deterministic mode also fills
    new memory there): a copy from another stream must wait for it once."""

    __slots__ = ("host", "array", "dev", "event", "copied", "busy", "fresh")

    def __init__(self, host: torch.Tensor, dev: torch.Tensor, event: Any):
        self.host, self.dev, self.event, self.copied = host, dev, event, None
        self.busy = self.fresh = True
        self.array = host.numpy() if _np is not None else None


class PinnedRing:
    """Staging slots for the mask, each reused only once the device is done with it.

    ``take(n)`` returns a slot of at least ``n`` bytes that is not busy and whose last kernel
    has completed (``event.query()``, which never waits), else a new one: the ring grows only
    as far as the host runs ahead of the device. ``release(slot, stream)`` records the event
    after the kernel is enqueued. ``device``, ``pin`` and ``make_event`` are parameters so the
    bookkeeping can be tested on a CPU with fake events.
    """

    def __init__(self, device: Any, *, pin: bool = True,
                 make_event: Callable[[], Any] | None = None):
        self.device, self.pin = torch.device(device), pin
        self.make_event = make_event or torch.cuda.Event
        self.slots: list[_Slot] = []
        self._next = 0

    def take(self, n: int) -> _Slot:
        k = len(self.slots)
        for i in range(k):
            j = (self._next + i) % k
            slot = self.slots[j]
            if not slot.busy and slot.event.query():
                if slot.host.numel() < n:
                    slot = self.slots[j] = self._new(n, slot.event)
                slot.busy = True
                self._next = (j + 1) % k
                return slot
        slot = self._new(n, self.make_event())
        self.slots.append(slot)
        self._next = 0
        return slot

    @staticmethod
    def release(slot: _Slot, stream: Any) -> None:
        slot.event.record(stream)
        slot.busy = False

    def _new(self, n: int, event: Any) -> _Slot:
        size = next_pow2(max(n, 4096))
        host = torch.empty(size, dtype=torch.uint8, pin_memory=self.pin)
        return _Slot(host, torch.empty(size, dtype=torch.uint8, device=self.device), event)


#: Copy the mask on a side stream of its own (the merge's stream waits for it with
#: ``cudaStreamWaitEvent``): the copy then runs while the GPU is still busy with earlier work
#: instead of in line ahead of the kernel. False: on the merge's stream. bench/bench_merge.py
#: --split --device-rows-same-stream measures the other way.
COPY_ON_SIDE_STREAM = True


class _State:
    """What one (device, stream) keeps between calls: the staging ring, the side stream the
    mask is copied on (or None), the program count the launch aims at."""

    __slots__ = ("ring", "copy_stream", "programs")

    def __init__(self, device: torch.device, programs: int):
        self.ring = PinnedRing(device)
        self.copy_stream = torch.cuda.Stream(device) if COPY_ON_SIDE_STREAM else None
        self.programs = programs


_STATES: dict[tuple[int, int], _State] = {}
_LOCK = threading.Lock()


def cache_key(device: torch.device, stream: Any) -> tuple[int, int]:
    """(device index, raw stream handle): each stream of each device has its own slots."""
    return device.index, stream.cuda_stream


def cached_states() -> dict[tuple[int, int], _State]:
    """The cache, for tests and for measuring what the variant keeps allocated."""
    return _STATES


def _state(device: torch.device, stream: Any) -> _State:
    key = cache_key(device, stream)
    state = _STATES.get(key)
    if state is None:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        state = _STATES[key] = _State(device, 4 * sms)
    return state


@dataclass(frozen=True)
class Staged:
    """A mask on its way to the device: ``mask`` (device bytes, at least ``n``), the slot to
    release once the kernel reading it is enqueued, on ``stream``."""

    mask: torch.Tensor
    programs: int
    slot: _Slot
    stream: Any


def scatter(src: torch.Tensor, cpu_mask: torch.Tensor, dst: torch.Tensor) -> None:
    """``dst[t] = src[multimodal tokens before t]`` for every t with ``cpu_mask[t]``, on
    ``dst``'s device and current stream, without a host wait. ``src`` has exactly as many
    rows as ``cpu_mask`` has set (the caller checked, on the host)."""
    staged = stage(cpu_mask, dst.device)
    try:
        launch(kernel(), src, staged.mask, dst, staged.programs)
    finally:
        release(staged)


def stage(cpu_mask: torch.Tensor, device: torch.device) -> Staged:
    """The mask's bytes copied into a free slot's pinned buffer, and from there to its device
    buffer by one non-blocking copy, ordered before whatever the current stream runs next.
    Separate from ``launch`` so that bench/bench_merge.py --host-phases can time each."""
    stream = torch.cuda.current_stream(device)
    n = cpu_mask.shape[0]
    with _LOCK:  # one slot per call even with threads sharing a stream
        state = _state(device, stream)
        slot = state.ring.take(n)
    staged = Staged(slot.dev, state.programs, slot, stream)
    try:
        if slot.array is not None:
            _np.copyto(slot.array[:n], cpu_mask.numpy().view(_np.uint8))
        else:
            slot.host[:n].copy_(cpu_mask)
        side = state.copy_stream
        if side is None:
            slot.dev[:n].copy_(slot.host[:n], non_blocking=True)
        else:
            if slot.fresh:  # see _Slot: once per allocation, on the device
                side.wait_stream(stream)
            with torch.cuda.stream(side):
                slot.dev[:n].copy_(slot.host[:n], non_blocking=True)
            if slot.copied is None:
                slot.copied = torch.cuda.Event()
            slot.copied.record(side)
            stream.wait_event(slot.copied)
        slot.fresh = False
    except BaseException:
        release(staged)  # after whatever was enqueued: never handed out while in use
        raise
    return staged


def release(staged: Staged) -> None:
    """The slot may be reused once the device has run what the stream holds now."""
    with _LOCK:
        PinnedRing.release(staged.slot, staged.stream)


def launch(jitted: Any, src: torch.Tensor, dev_mask: torch.Tensor, dst: torch.Tensor,
           programs: int) -> None:
    """The kernel over ``dst``'s tokens, reading the staged mask (``stage``)."""
    device = dst.device
    n, hidden = dst.shape
    cfg = device_rows_config(n, hidden, dst.element_size(), programs)
    as_int = _INT_OF_SIZE[dst.element_size()]
    s, d = src.view(as_int), dst.view(as_int)
    unit = s.stride(1) == 1 and d.stride(1) == 1
    args = (s, dev_mask, d, n, hidden, cfg.tokens_per_split, s.stride(0), s.stride(1),
            d.stride(0), d.stride(1))
    meta = dict(CHUNK=cfg.chunk, BLOCK_H=cfg.block_h, SCAN_BLOCK=SCAN, UNIT_H=unit,
                num_warps=cfg.num_warps)
    if device.type == "cuda" and device.index != torch.cuda.current_device():
        with torch.cuda.device(device):
            jitted[cfg.grid](*args, **meta)
    else:  # the current device (or CPU tensors under TRITON_INTERPRET=1)
        jitted[cfg.grid](*args, **meta)
