"""Merging multimodal embeddings into token embeddings: five ways, and what each costs.

The operation: ``inputs_embeds[is_multimodal] = multimodal_embeddings`` where ``is_multimodal``
is a bool mask over tokens. Every variant has the signature
``(inputs_embeds, is_multimodal, multimodal_embeddings) -> inputs_embeds`` (in place, returns
its first argument) and differs in where the mask must live and whether the host waits:

==  ======================  ===========  =======================================================
#   name                    mask on      sync behaviour (declared as data in ``cases/declared.py``)
==  ======================  ===========  =======================================================
1   ``index_put_cpu_mask``  CPU          torch >= 2.9: none (indices go through pinned memory);
                                         before 2.9: pageable H2D copy + cudaStreamSynchronize
2   ``masked_scatter``      device       none, but a temporary the size of the whole embedding;
                                         surplus embeddings silently ignored, too few trip a
                                         device-side assert (unchecked: only a sync could count)
3   ``index_put_gpu_mask``  device       syncs once: ``nonzero`` must learn how many rows
4   ``index_copy_rows``     CPU          none: rows computed on the host, pinned non-blocking H2D
5   ``triton_row_scatter``  CPU          none: variant 4's rows + a Triton row-copy kernel
6   ``triton_device_rows``  CPU          none: the mask staged pinned, rows computed on the
                                         device inside the Triton scatter kernel
==  ======================  ===========  =======================================================

``multimodal_embeddings`` is a ``(rows, hidden)`` tensor or a sequence of per-item tensors
(each ``(..., hidden)``, flattened and concatenated; may be empty) on the device of
``inputs_embeds``; it is cast to ``inputs_embeds.dtype``.

Validation is host-only by design: the number of mask slots is counted on the CPU mask (free),
or rides on the sync variant 3 makes anyway. Variant 2 cannot count without a sync, so it does
not check; that is the finding its tests record. A mismatch raises ValueError naming both counts
before anything is written.

Triton is imported only when variant 5 or 6 runs on CUDA (it is not installed on CPU machines).
Variant 6's staging, caches and kernel live in ``cases/device_rows.py``.
"""
from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from typing import Any, Callable

import torch

from cases import device_rows

try:
    import numpy as np
except ImportError:  # torch runs without numpy; the host row search then uses torch
    np = None

__all__ = [
    "Variant", "VARIANTS", "canonical_nan",
    "merge_index_put_cpu_mask", "merge_masked_scatter", "merge_index_put_gpu_mask",
    "merge_index_copy_rows", "merge_triton_row_scatter", "merge_triton_device_rows",
    "flatten_embeddings",
    "reference_merge", "bits", "supports_dtype", "triton_available", "triton_config",
    "representative_inputs", "measure_merge",
]


# ---------------------------------------------------------------------------------------------
# Shared input handling (host metadata only: never reads device memory)

def flatten_embeddings(multimodal_embeddings: Any, inputs_embeds: torch.Tensor,
                       name: str = "merge") -> torch.Tensor:
    """``(rows, hidden)`` in ``inputs_embeds.dtype`` from a tensor or a sequence of tensors."""
    hidden = inputs_embeds.shape[-1]
    if isinstance(multimodal_embeddings, torch.Tensor):
        items = [multimodal_embeddings]
    elif isinstance(multimodal_embeddings, (list, tuple)):
        items = list(multimodal_embeddings)
    else:
        raise TypeError(f"{name}: multimodal_embeddings must be a tensor or a list of tensors, "
                        f"got {type(multimodal_embeddings).__name__}")
    for i, t in enumerate(items):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: multimodal_embeddings[{i}] is a {type(t).__name__}, "
                            "not a tensor")
        if t.device != inputs_embeds.device:
            raise ValueError(f"{name}: multimodal_embeddings[{i}] is on {t.device} but "
                             f"inputs_embeds is on {inputs_embeds.device}; moving it would copy")
        if t.dim() == 0 or t.shape[-1] != hidden:
            raise ValueError(f"{name}: multimodal_embeddings[{i}] has shape {tuple(t.shape)}; "
                             f"its last dim must be hidden={hidden}")
    flat = [t.reshape(-1, hidden).to(inputs_embeds.dtype) for t in items]
    if not flat:
        return inputs_embeds.new_empty((0, hidden))
    return flat[0] if len(flat) == 1 else torch.cat(flat)


def _check_args(name: str, inputs_embeds: torch.Tensor, is_multimodal: torch.Tensor,
                mask_on: str) -> None:
    if not isinstance(inputs_embeds, torch.Tensor) or inputs_embeds.dim() != 2:
        raise ValueError(f"{name}: inputs_embeds must be a (tokens, hidden) tensor, got "
                         f"{getattr(inputs_embeds, 'shape', type(inputs_embeds).__name__)}")
    if not isinstance(is_multimodal, torch.Tensor) or is_multimodal.dtype != torch.bool:
        raise ValueError(f"{name}: is_multimodal must be a bool tensor, got "
                         f"{getattr(is_multimodal, 'dtype', type(is_multimodal).__name__)}")
    if tuple(is_multimodal.shape) != (inputs_embeds.shape[0],):
        raise ValueError(f"{name}: is_multimodal has shape {tuple(is_multimodal.shape)}; "
                         f"expected ({inputs_embeds.shape[0]},) to match inputs_embeds")
    if mask_on == "cpu" and is_multimodal.device.type != "cpu":
        raise ValueError(f"{name}: wants is_multimodal on the CPU (it counts and indexes on the "
                         f"host), got it on {is_multimodal.device}")
    if mask_on == "device" and is_multimodal.device != inputs_embeds.device:
        raise ValueError(f"{name}: wants is_multimodal on {inputs_embeds.device} like "
                         f"inputs_embeds, got it on {is_multimodal.device}")


def _check_count(name: str, n_slots: int, n_rows: int) -> None:
    if n_slots != n_rows:
        raise ValueError(f"{name}: is_multimodal has {n_slots} multimodal token(s) but "
                         f"multimodal_embeddings has {n_rows} row(s)")


def _count_slots(is_multimodal: torch.Tensor) -> int:
    """Multimodal tokens in a CPU mask (numpy: a fraction of torch's per-op CPU overhead)."""
    if np is not None:
        return int(np.count_nonzero(is_multimodal.numpy()))
    return int(is_multimodal.sum())


def _host_rows(name: str, is_multimodal: torch.Tensor, mm: torch.Tensor, *, pinned: bool,
               index_dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """Destination rows from the CPU mask, after the count check; in page-locked memory when
    ``pinned``, so that the copy to the device is truly non-blocking (the caching host
    allocator keeps the buffer until the copy has read it).

    numpy finds the rows and they are written straight into the pinned buffer (one pass, cast
    included): torch's CPU ``nonzero`` plus ``pin_memory()`` cost more host time per call.
    """
    if np is not None:
        idx = np.flatnonzero(is_multimodal.numpy())
        _check_count(name, idx.size, mm.shape[0])
        if not pinned:
            return torch.from_numpy(idx).to(index_dtype)
        buf = torch.empty(idx.size, dtype=index_dtype, pin_memory=True)
        buf.numpy()[...] = idx
        return buf
    rows = torch.nonzero(is_multimodal).flatten().to(index_dtype)
    _check_count(name, rows.numel(), mm.shape[0])
    return rows.pin_memory() if pinned else rows


# ---------------------------------------------------------------------------------------------
# The variants

def merge_index_put_cpu_mask(inputs_embeds: torch.Tensor, is_multimodal: torch.Tensor,
                             multimodal_embeddings: Any) -> torch.Tensor:
    """1: ``inputs_embeds[cpu_mask] = mm``. Sync-free on torch >= 2.9, which moves the mask's
    indices through pinned memory; torch 2.8 copies them from pageable memory and waits."""
    name = "index_put_cpu_mask"
    _check_args(name, inputs_embeds, is_multimodal, "cpu")
    mm = flatten_embeddings(multimodal_embeddings, inputs_embeds, name)
    _check_count(name, _count_slots(is_multimodal), mm.shape[0])  # CPU mask: no sync
    inputs_embeds[is_multimodal] = mm
    return inputs_embeds


def merge_masked_scatter(inputs_embeds: torch.Tensor, is_multimodal: torch.Tensor,
                         multimodal_embeddings: Any) -> torch.Tensor:
    """2: ``masked_scatter_`` with the mask on the device. No sync, but:

    * it allocates a temporary the size of the whole embedding (the mask's prefix sum);
    * the row count is NOT checked: counting the device mask's slots needs a sync. Surplus
      embeddings are silently ignored; too few trip a device-side assert on CUDA (which
      poisons the process's CUDA context) and a RuntimeError on the CPU.
    """
    name = "masked_scatter"
    _check_args(name, inputs_embeds, is_multimodal, "device")
    mm = flatten_embeddings(multimodal_embeddings, inputs_embeds, name)
    inputs_embeds.masked_scatter_(is_multimodal.unsqueeze(-1).expand_as(inputs_embeds), mm)
    return inputs_embeds


def merge_index_put_gpu_mask(inputs_embeds: torch.Tensor, is_multimodal: torch.Tensor,
                             multimodal_embeddings: Any) -> torch.Tensor:
    """3: index_put with the mask on the device. ``inputs_embeds[mask] = mm`` runs ``nonzero``
    inside, and nonzero syncs: the host needs the row count to size its output. Calling it
    here lets the count check ride on that one sync (``x[mask] = mm`` alone would also
    broadcast a single row over every slot without complaint)."""
    name = "index_put_gpu_mask"
    _check_args(name, inputs_embeds, is_multimodal, "device")
    mm = flatten_embeddings(multimodal_embeddings, inputs_embeds, name)
    rows = torch.nonzero(is_multimodal).flatten()  # the sync
    _check_count(name, rows.numel(), mm.shape[0])
    inputs_embeds.index_put_((rows,), mm)
    return inputs_embeds


def merge_index_copy_rows(inputs_embeds: torch.Tensor, is_multimodal: torch.Tensor,
                          multimodal_embeddings: Any) -> torch.Tensor:
    """4: destination rows computed on the host from the CPU mask, sent by a pinned
    non-blocking copy, then ``index_copy_``: no sync, no mask-sized temporary."""
    name = "index_copy_rows"
    _check_args(name, inputs_embeds, is_multimodal, "cpu")
    mm = flatten_embeddings(multimodal_embeddings, inputs_embeds, name)
    on_cuda = inputs_embeds.device.type == "cuda"
    rows = _host_rows(name, is_multimodal, mm, pinned=on_cuda)  # CPU merges never pin
    if on_cuda:
        rows = rows.to(inputs_embeds.device, non_blocking=True)
    inputs_embeds.index_copy_(0, rows, mm)
    return inputs_embeds


def merge_triton_row_scatter(inputs_embeds: torch.Tensor, is_multimodal: torch.Tensor,
                             multimodal_embeddings: Any) -> torch.Tensor:
    """5: variant 4's host rows, then a Triton kernel copying row i of the embeddings into row
    ``rows[i]`` of ``inputs_embeds`` (bit copy, strided, vectorised along hidden). Aims at the
    speed of a plain copy of the same bytes. CPU tensors fall back to plain indexing."""
    name = "triton_row_scatter"
    _check_args(name, inputs_embeds, is_multimodal, "cpu")
    mm = flatten_embeddings(multimodal_embeddings, inputs_embeds, name)
    if inputs_embeds.device.type != "cuda":
        rows = _host_rows(name, is_multimodal, mm, pinned=False)
        inputs_embeds.index_put_((rows,), mm)  # CPU fallback: plain indexing
        return inputs_embeds
    if not triton_available():
        raise RuntimeError(f"{name}: needs triton for CUDA tensors, and triton is not installed")
    # int32 rows halve the bytes to copy; the kernel widens offsets to int64.
    index_dtype = torch.int32 if inputs_embeds.shape[0] < 2**31 else torch.int64
    rows = _host_rows(name, is_multimodal, mm, pinned=True, index_dtype=index_dtype)
    if rows.numel() == 0:
        return inputs_embeds
    row_scatter(mm, rows.to(inputs_embeds.device, non_blocking=True), inputs_embeds)
    return inputs_embeds


def merge_triton_device_rows(inputs_embeds: torch.Tensor, is_multimodal: torch.Tensor,
                             multimodal_embeddings: Any) -> torch.Tensor:
    """6: the CPU mask's bytes go to the device (staged in a reused pinned slot, one
    non-blocking copy on a side stream) and one Triton kernel computes the rows (a prefix
    count of the mask)
    and copies them (``cases/device_rows.py``). The host only counts the mask's slots (for the
    check) and copies N bytes; it never finds the rows.

    Why, as a hypothesis to be measured (``bench/bench_merge.py --split``; variant 5 spends
    244 us of host time per call at 131072x8192, H200, torch 2.11.0). Inferred from reading
    variant 5's path, at 131072 tokens (65536 rows), per call:

    * rows found on the host: ``np.flatnonzero`` over 131072 bools (~50-150 us) and its int64
      result cast into int32 (~20-50 us): grows with the tokens, and is most of the 244 us;
    * ``torch.empty(pin_memory=True)`` for the rows (caching host allocator, ~5-20 us) and the
      non-blocking H2D copy (~5-15 us);
    * the launch: ``triton_config`` recomputed, two dtype views, ``torch.cuda.device`` entered,
      Triton's Python launch path (~20-40 us, fixed);
    * checks and ``flatten_embeddings`` (~3-5 us, shared by every variant).

    Here the size-dependent part is ``np.count_nonzero`` (vectorised, ~5 us) and a 128 KiB
    memcpy (~5 us); the fixed part is one H2D copy issued on a side stream (a stream switch,
    two event records, one ``cudaStreamWaitEvent``, one ``cudaEventQuery``: ~10 us), a cached
    config and the Triton launch, which is then the largest remaining cost: ~40-70 us in all is
    the guess, so the 25 us goal likely needs a cheaper launch (Triton's compiled-kernel
    launcher called directly, or a CUDA graph), NOT done here. On the device, the side stream
    lets the mask copy run while earlier work still occupies the GPU, so the kernel does not
    wait for it; on the merge's own stream (``device_rows.COPY_ON_SIDE_STREAM = False``) the
    copy would add ~2 us in line, most visible at 2048x2048. ``--split
    --device-rows-same-stream`` measures that way too.

    Memory: no temporary per call; each staging slot keeps ``next_pow2(tokens)`` bytes of
    pinned host memory and as many on the device between calls, one slot per call the host is
    ahead of the device (so ``peak_extra_bytes``, measured after a warm-up, does not show
    them: 128 KiB per slot at 131072 tokens).

    CPU tensors take ``device_rows.scatter_cpu``: the same row map computed with torch by the
    kernel's decomposition, then a bit copy.
    """
    name = "triton_device_rows"
    _check_args(name, inputs_embeds, is_multimodal, "cpu")
    mm = flatten_embeddings(multimodal_embeddings, inputs_embeds, name)
    n_slots = _count_slots(is_multimodal)
    _check_count(name, n_slots, mm.shape[0])
    if n_slots == 0:
        return inputs_embeds
    if inputs_embeds.device.type != "cuda":
        device_rows.scatter_cpu(mm, is_multimodal, inputs_embeds)
        return inputs_embeds
    if not triton_available():
        raise RuntimeError(f"{name}: needs triton for CUDA tensors, and triton is not installed")
    device_rows.scatter(mm, is_multimodal, inputs_embeds)
    return inputs_embeds


@dataclass(frozen=True)
class Variant:
    """A merge implementation and the facts a case needs about it."""

    name: str
    fn: Callable[[torch.Tensor, torch.Tensor, Any], torch.Tensor]
    mask_on: str  # "cpu": the mask must be a CPU tensor; "device": on inputs_embeds' device
    checks_count: bool  # whether a row-count mismatch raises ValueError
    needs_triton_on_cuda: bool = False
    summary: str = ""


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("index_put_cpu_mask", merge_index_put_cpu_mask, "cpu", True,
            summary="inputs_embeds[cpu_mask] = mm"),
    Variant("masked_scatter", merge_masked_scatter, "device", False,
            summary="masked_scatter_ with a device mask"),
    Variant("index_put_gpu_mask", merge_index_put_gpu_mask, "device", True,
            summary="nonzero(device mask) + index_put_"),
    Variant("index_copy_rows", merge_index_copy_rows, "cpu", True,
            summary="host rows, pinned non-blocking H2D, index_copy_"),
    Variant("triton_row_scatter", merge_triton_row_scatter, "cpu", True,
            needs_triton_on_cuda=True, summary="host rows + Triton row-scatter kernel"),
    Variant("triton_device_rows", merge_triton_device_rows, "cpu", True,
            needs_triton_on_cuda=True,
            summary="CPU mask staged pinned, rows + scatter in one Triton kernel"),
)}


# ---------------------------------------------------------------------------------------------
# Triton row scatter (the kernel is plain Python until triton is imported on first CUDA use)

# triton.language and the shared tile copy (cases/device_rows.py), bound by _load_triton(); the
# kernel reads them as globals
tl: Any = None
copy_tile: Any = None
_TRITON: dict[str, Any] = {}
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _row_scatter_kernel(src_ptr, rows_ptr, dst_ptr, n_rows, hidden,
                        src_stride_r, src_stride_h, dst_stride_r, dst_stride_h,
                        ROWS: tl.constexpr, BLOCK_H: tl.constexpr, UNIT_H: tl.constexpr):
    """dst[rows[i], h] = src[i, h] for a ROWS x BLOCK_H tile. Offsets are int64 (2**31
    elements is only 16 GiB of bf16); UNIT_H (both hidden strides 1) lets loads vectorise."""
    pid_r = tl.program_id(0)
    pid_h = tl.program_id(1)
    r = pid_r * ROWS + tl.arange(0, ROWS)
    r_ok = r < n_rows
    dst_r = tl.load(rows_ptr + r, mask=r_ok, other=0).to(tl.int64)
    src_r = r.to(tl.int64)
    h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    copy_tile(src_ptr, dst_ptr, src_r, dst_r, h, r_ok[:, None] & (h < hidden)[None, :],
              src_stride_r, src_stride_h, dst_stride_r, dst_stride_h, UNIT_H)


def triton_available() -> bool:
    try:
        _load_triton()
    except ImportError:
        return False
    return True


def _load_triton():
    if not _TRITON:
        _TRITON["triton"], _TRITON["kernel"] = device_rows.jit_with_triton(_row_scatter_kernel)
    return _TRITON["triton"], _TRITON["kernel"]


def triton_config(hidden: int, element_size: int) -> dict[str, int]:
    """Tile for one program: about 16 KiB (whole rows when they fit), at least 2 rows x 16
    columns (no size-1 ``tl.arange``), 8 warps for big tiles. ``bench/bench_merge.py``
    times alternatives side by side (``--sweep``)."""
    tile = 16384 // element_size
    block_h = min(max(16, device_rows.next_pow2(hidden)), tile // 2)
    rows = max(2, min(32, tile // block_h))
    num_warps = 8 if block_h * rows * element_size >= 8192 else 4
    return {"block_h": block_h, "rows_per_program": rows, "num_warps": num_warps}


def row_scatter(src: torch.Tensor, rows: torch.Tensor, dst: torch.Tensor, *,
                block_h: int | None = None, rows_per_program: int | None = None,
                num_warps: int | None = None) -> None:
    """Launch the kernel: ``dst[rows[i]] = src[i]`` (same dtype; ``rows`` int32 or int64 on the
    device).

    Tensors are reinterpreted as same-width integers, so the copy is bit-exact and float8
    needs no kernel support of its own.
    """
    triton, kernel = _load_triton()
    n, hidden = src.shape
    cfg = triton_config(hidden, src.element_size())
    block_h = block_h or cfg["block_h"]
    rows_per_program = rows_per_program or cfg["rows_per_program"]
    num_warps = num_warps or cfg["num_warps"]
    as_int = _INT_OF_SIZE[src.element_size()]
    s, d = src.view(as_int), dst.view(as_int)
    unit = s.stride(1) == 1 and d.stride(1) == 1
    grid = (triton.cdiv(n, rows_per_program), triton.cdiv(hidden, block_h))
    with torch.cuda.device(dst.device):
        kernel[grid](s, rows, d, n, hidden, s.stride(0), s.stride(1), d.stride(0), d.stride(1),
                     ROWS=rows_per_program, BLOCK_H=block_h, UNIT_H=unit, num_warps=num_warps)


# ---------------------------------------------------------------------------------------------
# Helpers for cases: reference, bit view, dtype support

def canonical_nan(t: torch.Tensor) -> torch.Tensor:
    """A copy with every NaN replaced by the one canonical NaN (for kernels that do that)."""
    if not t.dtype.is_floating_point:
        return t
    wide = t.float()
    nan = torch.isnan(wide)
    if not bool(nan.any()):
        return t
    return torch.where(nan, torch.full_like(wide, float("nan")), wide).to(t.dtype)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The same memory as same-width integers, so ``torch.equal`` compares bits (NaN, -0.0)."""
    return t.view(_INT_OF_SIZE[t.element_size()]) if t.dtype.is_floating_point else t


def reference_merge(inputs_embeds: torch.Tensor, is_multimodal: torch.Tensor,
                    multimodal_embeddings: Any) -> torch.Tensor:
    """The expected result, on the CPU, by the plainest means: one row copy per multimodal
    token, in order. Shares ``flatten_embeddings`` (the dtype cast is torch's ``.to``)."""
    mm = flatten_embeddings(multimodal_embeddings, inputs_embeds, "reference").cpu()
    out = inputs_embeds.detach().cpu().clone()
    rows = torch.nonzero(is_multimodal.cpu()).flatten().tolist()
    _check_count("reference", len(rows), mm.shape[0])
    for k, r in enumerate(rows):
        out[r].copy_(mm[k])
    return out


_SUPPORT: dict[tuple[str, torch.dtype, str, bool, bool], bool] = {}


def supports_dtype(variant: str, dtype: torch.dtype, device: Any, *,
                   deterministic: bool = False, one_element: bool = False) -> bool:
    """Whether this torch build runs ``variant`` for ``dtype`` on ``device`` (with
    deterministic algorithms on or off: they swap in kernels with their own dtype lists).

    A probe, used only to cross-check the declared table (``cases/declared.py``): the cases draw
    their dtypes from the table, never from this. Two examples, because kernels differ by shape:
    4 tokens x 3 hidden from a list of two items (the concatenation is covered too), and with
    ``one_element`` a single-element value (1 token x 1 hidden), which index_put_ with a mask
    turns into ``masked_fill``. Only NotImplementedError or a RuntimeError saying "not
    implemented for" counts as unsupported; any other error propagates.
    """
    device = torch.device(device)
    key = (variant, dtype, str(device), bool(deterministic), bool(one_element))
    if key not in _SUPPORT:
        v = VARIANTS[variant]
        from syncguard import allow
        from syncguard.strategies import deterministic_algorithms

        with allow("probing whether a variant supports a dtype"), \
                deterministic_algorithms(deterministic):
            if one_element:
                x = torch.zeros(2, 1, dtype=dtype, device=device)
                mask = torch.tensor([False, True])
                mm = [torch.zeros(1, 1, dtype=dtype, device=device)]
            else:
                x = torch.zeros(4, 3, dtype=dtype, device=device)
                mask = torch.tensor([True, False, True, True])
                mm = [torch.zeros(1, 3, dtype=dtype, device=device),
                      torch.zeros(2, 3, dtype=dtype, device=device)]
            mask = mask.to(device) if v.mask_on == "device" else mask
            try:
                v.fn(x, mask, mm)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                ok = True
            except NotImplementedError:
                ok = False
            except RuntimeError as e:
                if "not implemented for" not in str(e):
                    raise
                ok = False
        _SUPPORT[key] = ok
    return _SUPPORT[key]


# ---------------------------------------------------------------------------------------------
# Representative inputs and measurements (bench/bench_merge.py and the GPU measurement test)

def representative_inputs(variant: str, tokens: int, hidden: int, *,
                          dtype: torch.dtype = torch.bfloat16, device: Any = "cuda",
                          span: int = 1024, seed: int = 0):
    """``(inputs_embeds, is_multimodal, mm)`` with half the tokens multimodal, in alternating
    ``span``-token runs (image-token blocks), the mask where ``variant`` wants it."""
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed)
    span = max(1, min(span, tokens // 2 or 1))
    mask = (torch.arange(tokens) // span) % 2 == 1
    n = int(mask.sum())
    fill = dtype if dtype.itemsize > 1 else torch.float32  # no randn for float8
    inputs_embeds = torch.randn(tokens, hidden, generator=gen, device=device, dtype=fill).to(dtype)
    mm = torch.randn(n, hidden, generator=gen, device=device, dtype=fill).to(dtype)
    if VARIANTS[variant].mask_on == "device":
        mask = mask.to(device)
    return inputs_embeds, mask, mm


def peak_extra_bytes(fn: Callable[[], Any]) -> int:
    """Device memory ``fn`` needs beyond what is already allocated (its temporaries)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def _median_ms(fn: Callable[[], Any], warmup: int, reps: int) -> tuple[float, list[float]]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    pairs = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) for s, e in pairs]
    return statistics.median(times), times


def measure_merge(variant: str, tokens: int, hidden: int, *,
                  dtype: torch.dtype = torch.bfloat16, warmup: int = 10, reps: int = 100,
                  device: Any = "cuda", triton_overrides: dict | None = None) -> dict:
    """Median time (CUDA events) of one merge and of a plain copy of the same bytes, their
    ratio, and the peak device memory the merge allocates beyond what it was handed.
    ``triton_overrides`` (Triton variants only; ``{}`` = default) times the kernel alone, rows
    (variant 5, tile keys of ``row_scatter``) or the mask (variant 6, key ``programs``: how
    many programs ``device_rows_config`` aims at) already on the device.

    Host work (the CPU nonzero, pinning) is inside the timed window: when it is longer than
    the GPU work, the GPU waits and the events show it. Recorded, never asserted.
    """
    v = VARIANTS[variant]
    inputs_embeds, mask, mm = representative_inputs(variant, tokens, hidden, dtype=dtype,
                                                    device=device)
    kernel_only = triton_overrides is not None and v.needs_triton_on_cuda
    if kernel_only and variant == "triton_row_scatter":  # rows on the device, no host work
        rows = torch.nonzero(mask).flatten().to(device)

        def run():
            row_scatter(mm, rows, inputs_embeds, **triton_overrides)
    elif kernel_only:  # triton_device_rows: the mask staged once, the kernel alone timed
        staged = device_rows.stage(mask, inputs_embeds.device)
        device_rows.release(staged)  # stays valid: nothing else takes slots meanwhile
        programs = triton_overrides.get("programs", staged.programs)
        jitted = device_rows.kernel()

        def run():
            device_rows.launch(jitted, mm, staged.mask, inputs_embeds, programs)
    else:
        def run():
            v.fn(inputs_embeds, mask, mm)
    median_ms, times = _median_ms(run, warmup, reps)
    dst = torch.empty_like(mm)
    copy_ms, _ = _median_ms(functools.partial(dst.copy_, mm), warmup, reps)
    del dst
    peak_extra = peak_extra_bytes(run)
    times.sort()
    out = {
        "variant": variant, "tokens": tokens, "hidden": hidden, "dtype": str(dtype).replace(
            "torch.", ""), "mm_rows": mm.shape[0], "bytes_copied": mm.numel() * mm.element_size(),
        "median_ms": round(median_ms, 5), "p10_ms": round(times[len(times) // 10], 5),
        "p90_ms": round(times[(len(times) * 9) // 10], 5), "copy_median_ms": round(copy_ms, 5),
        "ratio_to_copy": round(median_ms / copy_ms, 3) if copy_ms > 0 else None,
        "peak_extra_bytes": int(peak_extra), "reps": reps, "warmup": warmup,
        "torch": str(torch.__version__), "device": torch.cuda.get_device_name(torch.device(device)),
    }
    if variant == "triton_row_scatter":
        out["triton_config"] = dict(triton_config(hidden, mm.element_size()),
                                    **(triton_overrides or {}))
        out["kernel_only"] = kernel_only
    elif variant == "triton_device_rows":
        sms = torch.cuda.get_device_properties(torch.device(device)).multi_processor_count
        programs = (triton_overrides or {}).get("programs", 4 * sms)
        cfg = device_rows.device_rows_config(tokens, hidden, mm.element_size(), programs)
        out["triton_config"] = dict(vars(cfg), programs=programs)
        out["kernel_only"] = kernel_only
    return out
