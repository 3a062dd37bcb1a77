"""The GPU snippet corpus: each snippet states the sync kinds it must produce, on the line
marked ``# SYNC``. Shared by the GPU tests and by tools/corpus_report.py (the committed table)."""
from __future__ import annotations

import inspect
import types
from dataclasses import dataclass
from typing import Callable

SNIPPETS: list["Snippet"] = []


@dataclass(frozen=True)
class Snippet:
    name: str
    fn: Callable
    expect: tuple[str, ...]  # kinds that must be reported (empty: must be clean)
    debug_sees: bool  # whether torch's sync-debug mode is expected to flag it
    before_2_9: tuple[str, ...] | None = None  # what torch < 2.9 does instead, where it differs
    # What the torch-hook fallback (debug/trace/gpu_trace) names it on torch < 2.9, where that is
    # not the truth: those hooks see a stream sync inside an op but not the copy before it, so
    # they call every in-op wait a D2H read (measured on 2.8.0 at c0bd2c4,
    # reports/archive/c0bd2c4/gpu-2.8.0/tests-gpu-2.8.0.log). The cuda detector reads the copy's own parameters.
    hooks_before_2_9: tuple[str, ...] | None = None

    def hook_expected(self, torch_version: str) -> tuple[str, ...]:
        major, minor = (int(x) for x in torch_version.split(".")[:2])
        if self.hooks_before_2_9 is not None and (major, minor) < (2, 9):
            return self.hooks_before_2_9
        return self.expected(torch_version)

    def expected(self, torch_version: str) -> tuple[str, ...]:
        major, minor = (int(x) for x in torch_version.split(".")[:2])
        return self.before_2_9 if self.before_2_9 is not None and (major, minor) < (2, 9) else self.expect

    def debug_expected(self, torch_version: str) -> bool:
        return any(k in ("stream_sync", "blocking_copy_d2h", "blocking_copy_h2d")
                   for k in self.expected(torch_version))

    @property
    def sync_line(self) -> int | None:
        lines, start = inspect.getsourcelines(self.fn)
        for i, text in enumerate(lines):
            if "# SYNC" in text:
                return start + i
        return None


def snippet(*expect: str, debug: bool | None = None, before_2_9: tuple[str, ...] | None = None,
            hooks_before_2_9: tuple[str, ...] | None = None):
    def deco(fn):
        sees = debug if debug is not None else any(
            k in ("stream_sync", "blocking_copy_d2h", "blocking_copy_h2d") for k in expect)
        SNIPPETS.append(Snippet(fn.__name__, fn, tuple(expect), sees, before_2_9,
                                hooks_before_2_9))
        return fn
    return deco


def state():
    """Tensors the snippets share, made before any region opens."""
    import torch

    d = "cuda"
    s = types.SimpleNamespace()
    s.x = torch.randn(4096, device=d)
    s.m_cuda = s.x > 0
    s.m_cpu = s.m_cuda.cpu()
    s.n = int(s.m_cpu.sum())
    s.emb = torch.randn(4096, 64, device=d)
    s.rows = torch.randn(s.n, 64, device=d)
    s.pinned = torch.randn(4096).pin_memory()
    s.pinned_out = torch.empty(4096).pin_memory()
    s.pageable = torch.randn(4096)
    s.pageable_out = torch.empty(4096)
    s.counts = torch.full((8,), 3, dtype=torch.long, device=d)
    s.idx = torch.randint(0, 4096, (512,), device=d)
    s.stream = torch.cuda.Stream()
    s.event = torch.cuda.Event()
    s.a = torch.randn(256, 256, device=d)
    return s


# --- syncs sync-debug mode flags ------------------------------------------------------------
@snippet("blocking_copy_d2h")
def item(s):
    s.x.sum().item()  # SYNC


@snippet("blocking_copy_d2h")
def tolist(s):
    s.x[:4].tolist()  # SYNC


@snippet("blocking_copy_d2h")
def bool_of_tensor(s):
    bool(s.x.sum() > 0)  # SYNC


@snippet("blocking_copy_d2h")
def int_of_tensor(s):
    int(s.x.argmax())  # SYNC


@snippet("blocking_copy_d2h")
def nonzero(s):
    s.x.nonzero()  # SYNC


@snippet("blocking_copy_d2h")
def masked_select(s):
    s.x.masked_select(s.m_cuda)  # SYNC


@snippet("blocking_copy_d2h")
def unique(s):
    s.x.unique()  # SYNC


@snippet("blocking_copy_d2h")
def repeat_interleave_no_output_size(s):
    import torch
    torch.repeat_interleave(s.counts)  # SYNC


@snippet("blocking_copy_d2h")
def index_with_cuda_mask(s):
    s.x[s.m_cuda]  # SYNC


@snippet("blocking_copy_d2h")
def assign_with_cuda_mask(s):
    s.emb[s.m_cuda] = s.rows  # SYNC


@snippet("blocking_copy_d2h")
def cpu(s):
    s.x.cpu()  # SYNC


@snippet("blocking_copy_d2h")
def copy_to_pageable_blocking(s):
    s.pageable_out.copy_(s.x)  # SYNC


@snippet("blocking_copy_h2d")
def to_cuda_pageable_blocking(s):
    s.pageable.to("cuda")  # SYNC


@snippet("blocking_copy_h2d")
def tensor_from_list(s):
    import torch
    torch.tensor([1, 2, 3], device="cuda")  # SYNC


@snippet("stream_sync")
def stream_synchronize(s):
    s.stream.synchronize()  # SYNC


@snippet("stream_sync")
def current_stream_synchronize(s):
    import torch
    torch.cuda.current_stream().synchronize()  # SYNC


# --- syncs sync-debug mode misses ---------------------------------------------------------
@snippet("device_sync")
def cuda_synchronize(s):
    import torch
    torch.cuda.synchronize()  # SYNC


@snippet("event_sync")
def event_synchronize(s):
    s.event.record()
    s.event.synchronize()  # SYNC


@snippet("pageable_copy")
def to_cuda_pageable_non_blocking(s):
    s.pageable.to("cuda", non_blocking=True)  # SYNC


@snippet("pageable_copy")
def copy_to_pageable_non_blocking(s):
    s.pageable_out.copy_(s.x, non_blocking=True)  # SYNC


@snippet("implicit_free")
def empty_cache_after_free(s):
    import torch
    t = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    del t
    torch.cuda.empty_cache()  # SYNC


# --- must stay clean ---------------------------------------------------------------------
# The seed change: before torch 2.9 a CPU mask went up by a pageable copy and a stream sync.
@snippet(before_2_9=("blocking_copy_h2d",), hooks_before_2_9=("blocking_copy_d2h",))
def index_with_cpu_mask(s):
    s.x[s.m_cpu]  # SYNC (torch < 2.9 only)


@snippet(before_2_9=("blocking_copy_h2d",), hooks_before_2_9=("blocking_copy_d2h",))
def assign_with_cpu_mask(s):
    s.emb[s.m_cpu] = s.rows  # SYNC (torch < 2.9 only)


@snippet()
def masked_scatter_cuda_mask(s):
    s.emb.masked_scatter_(s.m_cuda.unsqueeze(-1), s.rows)


@snippet()
def pinned_to_cuda_non_blocking(s):
    s.pinned.to("cuda", non_blocking=True)


@snippet()
def cuda_to_pinned_non_blocking(s):
    s.pinned_out.copy_(s.x, non_blocking=True)


@snippet()
def matmul(s):
    s.a @ s.a


@snippet()
def cumsum(s):
    s.x.cumsum(0)


@snippet()
def sort(s):
    s.x.sort()


@snippet()
def topk(s):
    s.x.topk(8)


@snippet()
def index_select(s):
    s.x.index_select(0, s.idx)


@snippet()
def scatter_add(s):
    import torch
    torch.zeros(4096, device="cuda").scatter_add_(0, s.idx, s.x[:512])


@snippet()
def repeat_interleave_with_output_size(s):
    import torch
    torch.repeat_interleave(s.counts, output_size=24)


@snippet()
def device_to_device_copy(s):
    s.x.clone()


@snippet()
def side_stream_work(s):
    import torch
    with torch.cuda.stream(s.stream):
        s.x * 2
