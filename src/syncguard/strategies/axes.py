"""The axes a sync case varies on: masks, dtypes, embedding shapes, where the mask lives, and the
global modes that change which kernel runs."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import hypothesis.strategies as st
from hypothesis.strategies import SearchStrategy

from syncguard.strategies.checks import (LAYOUTS, MASK_PATTERNS, MAX_HIDDEN, MAX_TOKENS, PLACEMENTS,
                                         _BASE_DTYPE_NAMES, _FLOAT8_NAMES, _check_bounds, _check_float,
                                         _check_int, _choices, _cuda_available, _fail, _shown_as_call,
                                         _tokens, _value_or_strategy)


# ---------------------------------------------------------------------------------------------
# Masks

@_shown_as_call
def masks(*, tokens: int | SearchStrategy[int] | None = None, min_tokens: int = 0,
          max_tokens: int = 64, min_density: float = 0.0, max_density: float = 1.0,
          patterns: Sequence[str] = MASK_PATTERNS) -> SearchStrategy:
    """Bool masks over ``tokens`` positions (a 1-D CPU ``torch.bool`` tensor).

    ``tokens`` fixes the length (value or strategy); otherwise it is drawn from
    ``[min_tokens, max_tokens]``. ``min_density``/``max_density`` bound the ``density`` pattern
    only; the other patterns are defined by their shape. Placement on a device is
    ``mask_placements``' job. With zero tokens every pattern gives an empty mask.
    """
    func = "masks()"
    _check_bounds(func, "tokens", min_tokens, max_tokens, 0, MAX_TOKENS)
    lo_d = _check_float(func, "min_density", min_density, 0.0, 1.0)
    hi_d = _check_float(func, "max_density", max_density, 0.0, 1.0)
    if lo_d > hi_d:
        raise _fail(func, f"min_density={lo_d} is greater than max_density={hi_d}")
    pats = _choices(func, "patterns", patterns, MASK_PATTERNS)
    tok = _tokens(func, tokens, min_tokens, max_tokens)

    @st.composite
    def draw_mask(draw):
        n = draw(tok)
        return draw(_mask_of_length(n, pats, lo_d, hi_d))

    return draw_mask()


def _mask_of_length(n: int, patterns: tuple[str, ...], lo_d: float, hi_d: float) -> SearchStrategy:
    @st.composite
    def draw_mask(draw):
        import torch

        pattern = draw(st.sampled_from(patterns))
        mask = torch.zeros(n, dtype=torch.bool)
        if n == 0 or pattern == "all_false":
            return mask
        if pattern == "all_true":
            return torch.ones(n, dtype=torch.bool)
        if pattern == "one":
            mask[draw(st.integers(0, n - 1))] = True
            return mask
        seed = draw(st.integers(0, 2**32 - 1))
        gen = torch.Generator().manual_seed(seed)
        if pattern == "density":
            p = draw(st.floats(lo_d, hi_d, allow_nan=False))
            return torch.rand(n, generator=gen) < p
        if pattern == "runs":
            # image-token spans: a few [start, start + length) runs, drawn directly so that
            # hypothesis can shrink them.
            k = draw(st.integers(1, 8))
            for _ in range(k):
                start = draw(st.integers(0, n - 1))
                length = draw(st.integers(1, max(1, min(n - start, 1 + n // 2))))
                mask[start:start + length] = True
            return mask
        # scattered: isolated tokens on even or odd positions, so never two adjacent
        slots = (n + 1) // 2
        count = draw(st.integers(1, slots))
        offset = draw(st.integers(0, 1)) if n > 1 and n % 2 == 0 else 0
        picks = torch.randperm(slots, generator=gen)[:count] * 2 + offset
        mask[picks[picks < n]] = True
        return mask

    return draw_mask()


# ---------------------------------------------------------------------------------------------
# Dtypes

def available_dtypes(*, float8: bool = True) -> tuple:
    """The float dtypes this torch build has: half, bfloat16, float, double and, when the build
    has them, float8_e4m3fn / float8_e5m2.

    Note: float8 tensors exist on builds whose index kernels do not cover them (torch 2.13 CPU:
    ``index_copy_`` and ``masked_scatter_`` raise NotImplementedError for float8, ``index_put_``
    works). Strategies offer float8; cases restrict it per operation (see ``exclude``).
    """
    import torch

    names = _BASE_DTYPE_NAMES + (_FLOAT8_NAMES if float8 else ())
    return tuple(getattr(torch, n) for n in names if hasattr(torch, n))


@_shown_as_call
def dtypes(*, float8: bool = True, exclude: Sequence = ()) -> SearchStrategy:
    """Floating dtypes for embeddings (see ``available_dtypes``), minus ``exclude``."""
    func = "dtypes()"
    if not isinstance(float8, bool):
        raise _fail(func, f"float8={float8!r} must be a bool")
    import torch

    if isinstance(exclude, torch.dtype):
        exclude = (exclude,)
    bad = [d for d in exclude if not isinstance(d, torch.dtype)]
    if bad:
        raise _fail(func, f"exclude has non-dtype value(s) {bad!r}")
    choices = [d for d in available_dtypes(float8=float8) if d not in tuple(exclude)]
    if not choices:
        raise _fail(func, f"exclude={tuple(exclude)!r} leaves no dtype to draw")
    return st.sampled_from(choices)


def _check_dtype(func: str, name: str, value: Any):
    import torch

    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise _fail(func, f"{name}={value!r} must be a floating torch.dtype")
    return value


# ---------------------------------------------------------------------------------------------
# Shapes and layouts

@dataclass(frozen=True)
class EmbeddingShape:
    """``(tokens, hidden)`` of ``inputs_embeds`` and how the tensor sits in memory."""

    tokens: int
    hidden: int
    layout: str = "contiguous"


# Hidden sizes worth hitting on purpose: 1, odd, just off powers of two, not multiples of 8.
_INTERESTING_HIDDEN = (1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 65, 127, 129, 1000, 1023, 1025,
                       4095, 4096, 4097, 8191, 8192)


@_shown_as_call
def embedding_shapes(*, tokens: int | SearchStrategy[int] | None = None,
                     hidden: int | SearchStrategy[int] | None = None, min_tokens: int = 0,
                     max_tokens: int = 64, min_hidden: int = 1, max_hidden: int = 64,
                     layouts: Sequence[str] = LAYOUTS) -> SearchStrategy[EmbeddingShape]:
    """Shapes of ``inputs_embeds`` (tokens in 0..65536, hidden in 1..8192) with a layout.

    Hidden sizes mix uniform draws with sizes that are deliberately not multiples of 8 or
    of a power-of-two block (vectorised kernels get those wrong).
    """
    func = "embedding_shapes()"
    _check_bounds(func, "tokens", min_tokens, max_tokens, 0, MAX_TOKENS)
    _check_bounds(func, "hidden", min_hidden, max_hidden, 1, MAX_HIDDEN)
    lays = _choices(func, "layouts", layouts, LAYOUTS)
    tok = _tokens(func, tokens, min_tokens, max_tokens)
    if hidden is None:
        special = [h for h in _INTERESTING_HIDDEN if min_hidden <= h <= max_hidden]
        hid = st.integers(min_hidden, max_hidden)
        if special:
            hid = st.one_of(hid, st.sampled_from(special))
    else:
        hid = _value_or_strategy(func, "hidden", hidden,
                                 lambda v: _check_int(func, "hidden", v, 1, MAX_HIDDEN))
    return st.builds(EmbeddingShape, tok, hid, st.sampled_from(lays))


# ---------------------------------------------------------------------------------------------
# Mask placement

@_shown_as_call
def mask_placements(*, placements: Sequence[str] | None = None) -> SearchStrategy[str]:
    """Where the mask lives: ``cpu``, and ``cpu_pinned``/``cuda`` only when CUDA is available.

    Asking explicitly for a placement this machine cannot give raises InvalidArgument rather
    than quietly testing something else.
    """
    func = "mask_placements()"
    cuda = _cuda_available()
    if placements is None:
        return st.sampled_from(PLACEMENTS if cuda else ("cpu",))
    wanted = _choices(func, "placements", placements, PLACEMENTS)
    if not cuda and any(p != "cpu" for p in wanted):
        raise _fail(func, f"placements={wanted!r} needs CUDA for "
                          f"{[p for p in wanted if p != 'cpu']!r}, and CUDA is not available")
    return st.sampled_from(wanted)


# ---------------------------------------------------------------------------------------------
# Global modes that change which kernel runs

@contextlib.contextmanager
def deterministic_algorithms(enabled: bool = True, *, warn_only: bool = False) -> Iterator[None]:
    """``torch.use_deterministic_algorithms(enabled)`` for a block, then the previous setting
    (including ``warn_only``) back, on every exit path.

    Deterministic mode swaps kernels (CUDA ``index_put_``/``index_copy_`` go through a sort), so
    it can change whether an op syncs; cases draw it with ``global_modes()``.
    """
    import torch

    prev, prev_warn = (torch.are_deterministic_algorithms_enabled(),
                       torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(bool(enabled), warn_only=warn_only)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(prev, warn_only=prev_warn)


@dataclass(frozen=True)
class GlobalMode:
    """Process-wide settings to run an example under; ``apply()`` sets and restores them."""

    deterministic: bool = False

    def apply(self) -> contextlib.AbstractContextManager:
        return deterministic_algorithms(self.deterministic)


@_shown_as_call
def global_modes(*, deterministic: bool | SearchStrategy[bool] | None = None
                 ) -> SearchStrategy[GlobalMode]:
    """Global modes (today: deterministic algorithms on/off); ``None`` draws both."""
    func = "global_modes()"

    def check(v):
        if not isinstance(v, bool):
            raise _fail(func, f"deterministic={v!r} must be a bool")
        return v

    det = st.booleans() if deterministic is None else _value_or_strategy(
        func, "deterministic", deterministic, check)
    return st.builds(GlobalMode, det)
