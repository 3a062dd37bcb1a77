"""Tensors from drawn seeds: random bits on the target device, and the consistent inputs of a
masked merge (:func:`merge_inputs`)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import hypothesis.strategies as st
from hypothesis.strategies import SearchStrategy

from syncguard.regions.region import allow
from syncguard.strategies.axes import (EmbeddingShape, _check_dtype, _mask_of_length, dtypes,
                                       embedding_shapes, mask_placements)
from syncguard.strategies.checks import (LAYOUTS, MASK_PATTERNS, MAX_HIDDEN, MAX_TOKENS, MM_CONTAINERS,
                                         PLACEMENTS, _check_bounds, _check_int, _choices, _cuda_available,
                                         _fail, _shown_as_call, _value_or_strategy)

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
