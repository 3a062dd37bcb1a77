"""Sync-free alternatives to patterns that make the host wait, as data.

Each entry names the corpus snippets of the syncing pattern (``replaces``) and the snippet of its
alternative (``checked_by``, in tests/gpu/library_corpus.py or tests/gpu/corpus.py). The corpus
runner measures both on the GPU in one run, so ``syncguard atlas`` prints, per torch version,
whether the alternative really is sync-free there: the table is a claim the evidence checks,
not advice taken on trust. ``hint()`` serves the same table to a failure message.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class Alternative:
    pattern: str  # the syncing call, as a user writes it
    instead: str  # what to write instead
    why: str  # why the original waits (and the catch of the alternative, if any)
    replaces: tuple[str, ...]  # corpus snippet ids of the syncing pattern
    checked_by: str  # corpus snippet id of the alternative, measured in the same run
    ops: tuple[str, ...] = ()  # aten ops that identify the pattern in an event's op chain


ALTERNATIVES: tuple[Alternative, ...] = (
    Alternative("repeat_interleave(counts)", "repeat_interleave(counts, output_size=total)",
                "the output length is the sum of counts, read on the host",
                ("corpus/repeat_interleave_no_output_size", "library/repeat_interleave_tensor"),
                "library/repeat_interleave_tensor_output_size", ("aten::repeat_interleave",)),
    Alternative("nonzero(mask) / where(mask)", "torch.nonzero_static(mask, size=N)",
                "the number of non-zeros sizes the result; nonzero_static pads to a fixed size",
                ("corpus/nonzero", "library/torch_nonzero", "library/where_one_arg"),
                "library/nonzero_static", ("aten::nonzero",)),
    Alternative("masked_select(x, mask) / x[mask]", "torch.where(mask, x, 0) (keeps the shape)",
                "the result's length is the mask's count",
                ("corpus/masked_select", "library/torch_masked_select",
                 "corpus/index_with_cuda_mask"),
                "library/where_three_args", ("aten::masked_select",)),
    Alternative("x[cuda_mask] = rows", "x.masked_scatter_(cuda_mask.unsqueeze(-1), rows)",
                "index_put with a bool mask runs nonzero; masked_scatter_ does not (no count "
                "check, and a mask-sized temporary)",
                ("corpus/assign_with_cuda_mask", "cases/merge_index_put_gpu_mask"),
                "corpus/masked_scatter_cuda_mask"),
    Alternative("nonzero(mask) + index_put_ (device mask)",
                "rows from the CPU mask on the host, pinned non-blocking H2D, index_copy_",
                "the device mask must be counted on the host",
                ("cases/merge_index_put_gpu_mask",), "cases/merge_index_copy_rows"),
    Alternative("torch.linalg.cholesky(A)", "torch.linalg.cholesky_ex(A) (check info later)",
                "it raises on a non-positive-definite input, so it reads info on the host",
                ("library/linalg_cholesky",), "library/linalg_cholesky_ex",
                ("aten::linalg_cholesky",)),
    Alternative("torch.linalg.inv(A)", "torch.linalg.inv_ex(A) (check info later)",
                "it raises on a singular input, so it reads info on the host",
                ("library/linalg_inv",), "library/linalg_inv_ex", ("aten::linalg_inv",)),
    Alternative("torch.linalg.solve(A, B)", "torch.linalg.solve_ex(A, B) (check info later)",
                "it raises on a singular input, so it reads info on the host",
                ("library/linalg_solve",), "library/linalg_solve_ex", ("aten::linalg_solve",)),
    Alternative("Categorical(probs, validate_args=True)",
                "Categorical(probs, validate_args=False), or "
                "Distribution.set_default_validate_args(False) outside debugging",
                "argument validation checks the constraint on the host",
                ("library/categorical_validate_args",), "library/categorical_no_validate_args"),
    Alternative("Normal(loc, scale, validate_args=True)",
                "Normal(loc, scale, validate_args=False)",
                "argument validation checks the constraint on the host",
                ("library/normal_validate_args",), "library/normal_no_validate_args"),
    Alternative("F.one_hot(labels)", "F.one_hot(labels, num_classes=C)",
                "without num_classes the class count is labels.max() + 1, read on the host",
                ("library/one_hot",), "library/one_hot_num_classes", ("aten::one_hot",)),
    Alternative("torch.bincount(x)", "torch.zeros(C).scatter_add_(0, x, ones) (C known)",
                "the number of bins is x.max() + 1, read on the host",
                ("library/bincount", "library/bincount_minlength"), "library/scatter_add_counts",
                ("aten::bincount",)),
    Alternative("torch.histc(x, bins)", "torch.histc(x, bins, min=lo, max=hi)",
                "without a range, min and max come from the data",
                ("library/histc",), "library/histc_with_range", ("aten::histc",)),
    Alternative("pageable.to('cuda', non_blocking=True)", "pinned.to('cuda', non_blocking=True)",
                "CUDA stages a pageable source through its own buffer, and the host waits",
                ("corpus/to_cuda_pageable_non_blocking", "corpus/to_cuda_pageable_blocking"),
                "corpus/pinned_to_cuda_non_blocking"),
    Alternative("pageable_out.copy_(cuda_x, non_blocking=True)",
                "pinned_out.copy_(cuda_x, non_blocking=True) (read it after an event)",
                "a device-to-pageable copy cannot run ahead of the host",
                ("corpus/copy_to_pageable_non_blocking", "corpus/copy_to_pageable_blocking"),
                "corpus/cuda_to_pinned_non_blocking"),
)


def for_snippet(snippet_id: str) -> Alternative | None:
    """The alternative to a corpus snippet (``library/one_hot``), if one is known."""
    return next((a for a in ALTERNATIVES if snippet_id in a.replaces), None)


def hint(ops: Iterable[str] = ()) -> str | None:
    """A one-line suggestion for a sync whose aten op chain is ``ops``; None when no entry
    applies (most syncs, e.g. ``.item()``, have no sync-free form: the host needs the value)."""
    chain = set(ops)
    for a in ALTERNATIVES:
        if chain.intersection(a.ops):
            return f"sync-free alternative: {a.instead} ({a.why})"
    return None
