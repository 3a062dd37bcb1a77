"""Hypothesis strategies for host<->device sync regression cases.

Why a module of its own: the inputs that decide whether an indexing op syncs (where the mask
lives, which dtype, whether the destination is a strided view, whether deterministic algorithms
are on) are the same across many cases, and getting them *consistent* (mask length = tokens,
embedding rows = mask slots, tensors on the right device) is fiddly. These strategies do it once.

Conventions follow hypothesis' own: plural nouns, keyword-only ``min_*``/``max_*`` bounds,
arguments that accept a plain value or a strategy, and ``hypothesis.errors.InvalidArgument`` with
a one-line message for bad arguments (raised when the strategy is built; a value drawn from a
strategy passed as an argument is checked when drawn).

Defaults are small so CPU test runs stay fast; large sizes (up to 65536 tokens x 8192 hidden)
only come when asked for with ``max_tokens``/``max_hidden``.

Tensor contents are random *bits* (any NaN payload, -0.0, infinities, subnormals), generated on
the target device from a seed that hypothesis draws, so no host->device copy is needed for them.
The one host->device copy (a mask placed on CUDA) runs inside ``syncguard.allow`` so an outer
``pytest --syncguard`` run does not blame the test for building its example.

Nothing here imports torch or touches CUDA at import time.
"""
from __future__ import annotations

__all__ = [
    "MAX_TOKENS", "MAX_HIDDEN", "MASK_PATTERNS", "LAYOUTS", "PLACEMENTS", "MM_CONTAINERS",
    "EmbeddingShape", "GlobalMode", "MergeInputs",
    "masks", "dtypes", "embedding_shapes", "mask_placements", "global_modes", "merge_inputs",
    "deterministic_algorithms", "available_dtypes", "random_bits",
]


from syncguard.strategies.axes import (EmbeddingShape, GlobalMode, available_dtypes, deterministic_algorithms,
                                       dtypes, embedding_shapes, global_modes, mask_placements, masks)
from syncguard.strategies.checks import LAYOUTS, MASK_PATTERNS, MAX_HIDDEN, MAX_TOKENS, MM_CONTAINERS, PLACEMENTS
from syncguard.strategies.tensors import MergeInputs, merge_inputs, random_bits
