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

import contextlib
import dataclasses
import functools
import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import hypothesis.strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import SearchStrategy

from syncguard.regions.region import allow

__all__ = [
    "MAX_TOKENS", "MAX_HIDDEN", "MASK_PATTERNS", "LAYOUTS", "PLACEMENTS", "MM_CONTAINERS",
    "EmbeddingShape", "GlobalMode", "MergeInputs",
    "masks", "dtypes", "embedding_shapes", "mask_placements", "global_modes", "merge_inputs",
    "deterministic_algorithms", "available_dtypes", "random_bits",
]

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


# ---------------------------------------------------------------------------------------------
# Tensors from drawn seeds

def random_bits(shape: Sequence[int], dtype, device, seed: int):
    """A contiguous tensor of ``dtype`` whose bytes are uniformly random (NaNs, -0.0, inf and
    subnormals included), generated on ``device`` from ``seed`` without a host copy."""
    import torch

    size = torch.empty((), dtype=dtype).element_size()
    shape = tuple(shape)
    gen = torch.Generator(device=device).manual_seed(seed)
    raw = torch.randint(0, 256, shape[:-1] + (shape[-1] * size,), dtype=torch.uint8,
                        device=device, generator=gen) if shape and shape[-1] else None
    if raw is None:
        return torch.empty(shape, dtype=dtype, device=device)
    return raw.view(dtype)


def _strided(tokens: int, hidden: int, layout: str, dtype, device, seed: int, pad: int):
    """(view, base): ``view`` is ``inputs_embeds`` laid out as ``layout`` inside ``base``."""
    if layout == "contiguous":
        base = random_bits((tokens, hidden), dtype, device, seed)
        return base, base
    if layout == "row_padded":
        base = random_bits((tokens, hidden + pad), dtype, device, seed)
        return base[:, :hidden], base
    if layout == "strided_rows":
        base = random_bits((2 * tokens, hidden), dtype, device, seed)
        return base[::2], base
    if layout == "transposed":
        base = random_bits((hidden, tokens), dtype, device, seed)
        return base.t(), base
    raise ValueError(f"unknown layout {layout!r}; choose from {', '.join(LAYOUTS)}")


@dataclass(frozen=True, eq=False)
class MergeInputs:
    """One consistent example for ``inputs_embeds[is_multimodal] = mm_embeds``.

    ``inputs_embeds`` is a view into ``base`` (the same tensor when contiguous), so a case can
    check that a merge wrote nothing outside the view. ``mm_embeds`` is a tensor or a list of
    per-item tensors with ``n_mm_rows`` rows in total (after flattening to ``(-1, hidden)``);
    ``extra_rows = n_mm_rows - n_slots`` is zero for a well-formed example.
    """

    inputs_embeds: Any
    base: Any
    is_multimodal: Any
    mm_embeds: Any
    device: Any
    dtype: Any
    mm_dtype: Any
    mask_placement: str
    layout: str
    tokens: int
    hidden: int
    n_slots: int
    n_mm_rows: int
    mm_container: str
    seed: int

    @property
    def extra_rows(self) -> int:
        return self.n_mm_rows - self.n_slots

    def fresh(self) -> "MergeInputs":
        """A copy with its own ``base`` (same layout and bits), so one example can be merged
        several times; the mask and embeddings are shared (merges do not write them)."""
        base = self.base.clone()
        view = base.as_strided(self.inputs_embeds.size(), self.inputs_embeds.stride(),
                               self.inputs_embeds.storage_offset())
        return dataclasses.replace(self, inputs_embeds=view, base=base)

    def mm_list(self) -> list:
        return list(self.mm_embeds) if self.mm_container == "list" else [self.mm_embeds]

    def _repr_pretty_(self, printer, cycle) -> None:  # hypothesis/IPython: no tensor dumps
        printer.text(repr(self))

    def __repr__(self) -> str:
        mm = (f"list[{len(self.mm_embeds)}]" if self.mm_container == "list" else "tensor")
        return (f"MergeInputs(tokens={self.tokens}, hidden={self.hidden}, dtype={self.dtype}, "
                f"mm_dtype={self.mm_dtype}, layout={self.layout!r}, device={self.device}, "
                f"mask_placement={self.mask_placement!r}, n_slots={self.n_slots}, "
                f"n_mm_rows={self.n_mm_rows}, mm={mm}, seed={self.seed})")


def _check_device(func: str, value: Any):
    import torch

    try:
        dev = torch.device(value)
    except (RuntimeError, TypeError):
        raise _fail(func, f"device={value!r} is not a torch device") from None
    if dev.type not in ("cpu", "cuda"):
        raise _fail(func, f"device={value!r} must be cpu or cuda")
    if dev.type == "cuda" and not _cuda_available():
        raise _fail(func, f"device={value!r} needs CUDA, which is not available")
    return dev


@_shown_as_call
def merge_inputs(*, device: Any = None, dtype: Any = None, mm_dtype: Any = None,
                 mask_placement: str | SearchStrategy[str] | None = None,
                 shape: EmbeddingShape | SearchStrategy[EmbeddingShape] | None = None,
                 extra_rows: int | SearchStrategy[int] = 0,
                 mm_container: str | SearchStrategy[str] | None = None,
                 mask_patterns: Sequence[str] = MASK_PATTERNS,
                 min_tokens: int = 0, max_tokens: int = 64, min_hidden: int = 1,
                 max_hidden: int = 64) -> SearchStrategy[MergeInputs]:
    """Consistent ``MergeInputs``: mask length = tokens, embedding rows = slots + extra_rows.

    * ``device``: where ``inputs_embeds`` and the embeddings live (default: cuda when
      available, else cpu).
    * ``dtype``: of ``inputs_embeds`` (default ``dtypes()``); ``mm_dtype``: of the embeddings
      (default, or a drawn ``None``: the same as ``dtype``; pass ``dtypes()`` to exercise the
      cast).
    * ``mask_placement``: default ``mask_placements()`` (pinned/cuda only with CUDA).
    * ``shape``: default ``embedding_shapes(min_tokens=..., max_tokens=..., ...)``.
    * ``extra_rows``: embedding rows beyond the mask's slots (negative: fewer). Fewer rows than
      zero is impossible, so the row count is clamped at 0; read ``.extra_rows`` for the real
      difference.
    * ``mm_container``: ``"tensor"`` or ``"list"`` (default: both).
    """
    func = "merge_inputs()"
    _check_bounds(func, "tokens", min_tokens, max_tokens, 0, MAX_TOKENS)
    _check_bounds(func, "hidden", min_hidden, max_hidden, 1, MAX_HIDDEN)
    pats = _choices(func, "mask_patterns", mask_patterns, MASK_PATTERNS)
    if device is None:
        dev = st.just(_check_device(func, "cuda" if _cuda_available() else "cpu"))
    else:
        dev = _value_or_strategy(func, "device", device, lambda v: _check_device(func, v))
    dt = dtypes() if dtype is None else _value_or_strategy(
        func, "dtype", dtype, lambda v: _check_dtype(func, "dtype", v))
    mdt = st.none() if mm_dtype is None else _value_or_strategy(
        func, "mm_dtype", mm_dtype,
        lambda v: v if v is None else _check_dtype(func, "mm_dtype", v))
    if mask_placement is None:
        place = None  # drawn per example: a CPU merge is never handed a CUDA mask
    elif isinstance(mask_placement, SearchStrategy):
        place = _value_or_strategy(func, "mask_placement", mask_placement,
                                   lambda v: _choices(func, "mask_placement", v, PLACEMENTS)[0])
    else:
        place = mask_placements(placements=_choices(func, "mask_placement", mask_placement,
                                                    PLACEMENTS))
    if shape is None:
        shp = embedding_shapes(min_tokens=min_tokens, max_tokens=max_tokens,
                               min_hidden=min_hidden, max_hidden=max_hidden)
    else:
        def check_shape(v):
            if not isinstance(v, EmbeddingShape):
                raise _fail(func, f"shape={v!r} must be an EmbeddingShape")
            _check_int(func, "shape.tokens", v.tokens, 0, MAX_TOKENS)
            _check_int(func, "shape.hidden", v.hidden, 1, MAX_HIDDEN)
            _choices(func, "shape.layout", v.layout, LAYOUTS)
            return v
        shp = _value_or_strategy(func, "shape", shape, check_shape)
    extra = _value_or_strategy(func, "extra_rows", extra_rows,
                               lambda v: _check_int(func, "extra_rows", v, -MAX_TOKENS, MAX_TOKENS))
    if mm_container is None:
        cont = st.sampled_from(MM_CONTAINERS)
    else:
        cont = _value_or_strategy(func, "mm_container", mm_container,
                                  lambda v: _choices(func, "mm_container", v, MM_CONTAINERS)[0])

    @st.composite
    def draw_inputs(draw):
        import torch

        device_ = draw(dev)
        if place is None:
            place_ = draw(mask_placements() if device_.type == "cuda" else
                          st.sampled_from(("cpu", "cpu_pinned") if _cuda_available() else ("cpu",)))
        else:
            place_ = draw(place)
        if device_.type == "cpu" and place_ == "cuda":
            raise _fail(func, "mask_placement='cuda' with device=cpu: a CPU merge cannot "
                              "take a CUDA mask")
        dtype_ = draw(dt)
        mm_dtype_ = draw(mdt) or dtype_
        shape_ = draw(shp)
        container = draw(cont)
        seed = draw(st.integers(0, 2**31 - 1))
        pad = draw(st.integers(1, 9))
        mask = draw(_mask_of_length(shape_.tokens, pats, 0.0, 1.0))
        n_slots = int(mask.sum())
        n_rows = max(0, n_slots + draw(extra))
        # Split the rows into per-item tensors; some items get a leading batch-like dim that
        # the merge must flatten.
        if container == "list":
            cuts = sorted(draw(st.lists(st.integers(0, n_rows), max_size=4)))
            sizes = [b - a for a, b in zip([0] + cuts, cuts + [n_rows])]
            if not n_rows and draw(st.booleans()):
                sizes = []  # an empty list: no multimodal items at all
            shapes_ = [((1, s, shape_.hidden) if draw(st.booleans()) else (s, shape_.hidden))
                       for s in sizes]
        else:
            shapes_ = [(n_rows, shape_.hidden)]
        with _allow("syncguard.strategies: building an example on the device"):
            view, base = _strided(shape_.tokens, shape_.hidden, shape_.layout, dtype_, device_,
                                  seed, pad)
            items = [random_bits(s, mm_dtype_, device_, seed + 1 + i) for i, s in
                     enumerate(shapes_)]
            if place_ == "cuda":
                mask = mask.to(device_)
            elif place_ == "cpu_pinned":
                mask = mask.pin_memory()
            if device_.type == "cuda":
                torch.cuda.synchronize(device_)
        return MergeInputs(
            inputs_embeds=view, base=base, is_multimodal=mask,
            mm_embeds=items if container == "list" else items[0], device=device_, dtype=dtype_,
            mm_dtype=mm_dtype_, mask_placement=place_, layout=shape_.layout,
            tokens=shape_.tokens, hidden=shape_.hidden, n_slots=n_slots, n_mm_rows=n_rows,
            mm_container=container, seed=seed)

    return draw_inputs()


def _allow(reason: str) -> allow:
    """``syncguard.allow(reason)``: building an example on the device may sync, by design."""
    return allow(reason)
