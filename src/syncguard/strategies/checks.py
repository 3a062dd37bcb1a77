"""Bounds, allowed values and the argument checks of the strategies: each raises hypothesis'
``InvalidArgument`` with one line naming the argument and the bad value."""
from __future__ import annotations

import functools
import inspect
import math
from typing import Any, Callable, Sequence

import hypothesis.strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import SearchStrategy


#: Largest sizes the strategies accept (the issue's range for multimodal merges).
MAX_TOKENS = 65536
MAX_HIDDEN = 8192

#: Mask shapes: ``density`` (each token multimodal with a drawn probability), ``all_false``,
#: ``all_true``, ``one`` (a single token), ``runs`` (contiguous spans, like image-token blocks),
#: ``scattered`` (isolated tokens, never two adjacent).
MASK_PATTERNS = ("density", "all_false", "all_true", "one", "runs", "scattered")

#: How ``inputs_embeds`` sits in memory. Non-contiguous views change which kernel runs (and
#: catch kernels that assume a row stride equal to ``hidden``):
#: ``row_padded`` = ``base[:, :hidden]`` of a wider buffer, ``strided_rows`` = ``base[::2]``,
#: ``transposed`` = ``base.t()`` of a ``(hidden, tokens)`` buffer (column stride != 1).
LAYOUTS = ("contiguous", "row_padded", "strided_rows", "transposed")

#: Where the mask lives: ``cpu`` (pageable), ``cpu_pinned`` (page-locked), ``cuda``.
PLACEMENTS = ("cpu", "cpu_pinned", "cuda")

#: How the multimodal embeddings are handed over: one ``(rows, hidden)`` tensor, or a list of
#: per-item tensors (each ``(..., hidden)``) that the merge flattens and concatenates.
MM_CONTAINERS = ("tensor", "list")

# The float8 formats index/copy kernels are built for on NVIDIA hardware; the ``fnuz`` ones
# are AMD formats and ``e8m0`` holds only scales.
_FLOAT8_NAMES = ("float8_e4m3fn", "float8_e5m2")
_BASE_DTYPE_NAMES = ("float16", "bfloat16", "float32", "float64")


# ---------------------------------------------------------------------------------------------
# Argument checking (one line, names the argument and the bad value) and readable reprs


def _shown_as_call(fn: Callable[..., SearchStrategy]) -> Callable[..., SearchStrategy]:
    """The strategy ``fn`` returns reads as the call that made it, ``masks(max_tokens=8)``, in
    hypothesis's output, instead of the name of an inner ``@st.composite`` (``draw_mask()``).
    Arguments are still checked when ``fn`` is called, not at the first draw."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        inner = fn(*args, **kwargs)

        def draw_it(draw, **_):
            return draw(inner)

        draw_it.__name__ = draw_it.__qualname__ = fn.__name__
        return st.composite(draw_it)(**signature.bind(*args, **kwargs).arguments)

    return wrapper

def _fail(func: str, message: str) -> InvalidArgument:
    return InvalidArgument(f"{func}: {message}")


def _check_int(func: str, name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(func, f"{name}={value!r} must be an int")
    if not lo <= value <= hi:
        raise _fail(func, f"{name}={value!r} must be in [{lo}, {hi}]")
    return value


def _check_bounds(func: str, what: str, lo_val: Any, hi_val: Any, lo: int, hi: int) -> None:
    _check_int(func, f"min_{what}", lo_val, lo, hi)
    _check_int(func, f"max_{what}", hi_val, lo, hi)
    if lo_val > hi_val:
        raise _fail(func, f"min_{what}={lo_val} is greater than max_{what}={hi_val}")


def _check_float(func: str, name: str, value: Any, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise _fail(func, f"{name}={value!r} must be a number")
    if not lo <= value <= hi:
        raise _fail(func, f"{name}={value!r} must be in [{lo}, {hi}]")
    return float(value)


def _value_or_strategy(func: str, name: str, value: Any, check) -> SearchStrategy:
    """A strategy for ``value``: checked now if plain, checked per draw if a strategy."""
    if isinstance(value, SearchStrategy):
        def checked(v):
            try:
                return check(v)
            except InvalidArgument as e:
                raise _fail(func, f"{name} strategy drew a bad value: {e}") from None
        return value.map(checked)
    return st.just(check(value))



def _tokens(func: str, tokens, min_tokens: int, max_tokens: int):
    """A fixed token count (value or strategy), else any count in the bounds."""
    if tokens is None:
        return st.integers(min_tokens, max_tokens)
    return _value_or_strategy(func, "tokens", tokens,
                              lambda v: _check_int(func, "tokens", v, 0, MAX_TOKENS))

def _choices(func: str, name: str, value: Any, allowed: Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    try:
        items = tuple(value)
    except TypeError:
        raise _fail(func, f"{name}={value!r} must be a name or a sequence of names") from None
    if not items:
        raise _fail(func, f"{name} is empty; choose from {', '.join(allowed)}")
    bad = [v for v in items if v not in allowed]
    if bad:
        raise _fail(func, f"{name} has unknown value(s) {bad!r}; choose from {', '.join(allowed)}")
    return tuple(dict.fromkeys(items))


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()
