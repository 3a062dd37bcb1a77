"""``syncguard.strategies``: drawn values keep their promises; bad arguments say what is wrong.

CPU only: every strategy here builds CPU tensors unless CUDA is present, and the CUDA-only
placements are checked to be refused without it.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument, NoSuchExample

from syncguard import strategies as sgs

CUDA = torch.cuda.is_available()
FEW = settings(max_examples=25, deadline=None)
#: find()'s own example budget, without its shrink phase: a "can the strategy reach this" check
#: needs one such value, not the smallest (shrinking merge inputs cost seconds per find)
REACH = settings(max_examples=2000, phases=(Phase.explicit, Phase.reuse, Phase.generate))


def reach(strategy, condition):
    """A value of ``strategy`` meeting ``condition`` (NoSuchExample if none is drawn)."""
    return find(strategy, condition, settings=REACH)


_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _int_bits(t):
    return t.view(_INT[t.element_size()])


# ---------------------------------------------------------------------------------------------
# masks

@FEW
@given(sgs.masks(min_tokens=3, max_tokens=50))
def test_masks_are_cpu_bool_vectors_within_bounds(mask):
    assert mask.dtype == torch.bool and mask.device.type == "cpu" and mask.dim() == 1
    assert 3 <= mask.numel() <= 50


@pytest.mark.parametrize("pattern, check", [
    ("all_false", lambda m: not m.any()),
    ("all_true", lambda m: bool(m.all())),
    ("one", lambda m: int(m.sum()) == 1),
    ("runs", lambda m: bool(m.any())),
    ("scattered", lambda m: bool(m.any()) and not bool((m[1:] & m[:-1]).any())),
])
def test_mask_patterns_have_their_shape(pattern, check):
    @FEW
    @given(sgs.masks(tokens=st.integers(1, 40), patterns=(pattern,)))
    def run(mask):
        assert check(mask), mask

    run()


def test_runs_make_contiguous_spans_and_density_is_bounded():
    # a mask with a run of at least 3 tokens exists in the "runs" pattern
    reach(sgs.masks(tokens=30, patterns=("runs",)),
          lambda m: bool((m[2:] & m[1:-1] & m[:-2]).any()))
    # any drawn mask must keep the bound: the first one drawn, not find()'s shrunk smallest
    never = reach(sgs.masks(tokens=20, patterns=("density",), max_density=0.0), lambda m: True)
    assert not never.any()
    always = reach(sgs.masks(tokens=20, patterns=("density",), min_density=1.0), lambda m: True)
    assert always.all()


def test_zero_tokens_give_an_empty_mask():
    assert find(sgs.masks(tokens=0), lambda m: True).numel() == 0


@pytest.mark.parametrize("kwargs, message", [
    (dict(min_tokens=-1), r"min_tokens=-1 must be in \[0, 65536\]"),
    (dict(max_tokens=65537), r"max_tokens=65537 must be in"),
    (dict(min_tokens=5, max_tokens=2), r"min_tokens=5 is greater than max_tokens=2"),
    (dict(min_tokens=1.5), r"min_tokens=1.5 must be an int"),
    (dict(max_tokens=True), r"max_tokens=True must be an int"),
    (dict(patterns=("blobs",)), r"patterns has unknown value\(s\) \['blobs'\]"),
    (dict(patterns=()), r"patterns is empty"),
    (dict(min_density=0.7, max_density=0.2), r"min_density=0.7 is greater than max_density=0.2"),
    (dict(max_density=1.5), r"max_density=1.5 must be in"),
    (dict(min_density=float("nan")), r"min_density=nan must be a number"),
    (dict(tokens=-3), r"tokens=-3 must be in"),
])
def test_masks_reject_bad_arguments(kwargs, message):
    with pytest.raises(InvalidArgument, match=r"^masks\(\): " + message):
        sgs.masks(**kwargs)


def test_a_strategy_argument_is_checked_when_drawn():
    strategy = sgs.masks(tokens=st.just(-4))  # fine to build: the value is only known later
    with pytest.raises(InvalidArgument, match="tokens strategy drew a bad value.*tokens=-4"):
        find(strategy, lambda m: True)


# ---------------------------------------------------------------------------------------------
# dtypes, shapes, placements

def test_dtypes_offer_float8_only_when_asked_and_present():
    with_f8 = {find(sgs.dtypes(), lambda d, want=d: d == want) for d in sgs.available_dtypes()}
    assert {torch.float16, torch.bfloat16, torch.float32, torch.float64} <= with_f8
    if hasattr(torch, "float8_e4m3fn"):
        assert torch.float8_e4m3fn in with_f8
    assert all(d.itemsize > 1 for d in sgs.available_dtypes(float8=False))
    with pytest.raises(NoSuchExample):
        find(sgs.dtypes(float8=False), lambda d: d.itemsize == 1)


def test_dtypes_exclude_and_errors():
    only = find(sgs.dtypes(exclude=[d for d in sgs.available_dtypes() if d != torch.float64]),
                lambda d: True)
    assert only == torch.float64
    with pytest.raises(InvalidArgument, match=r"^dtypes\(\): exclude=.* leaves no dtype"):
        sgs.dtypes(exclude=sgs.available_dtypes())
    with pytest.raises(InvalidArgument, match=r"exclude has non-dtype value\(s\) \['float16'\]"):
        sgs.dtypes(exclude=["float16"])
    with pytest.raises(InvalidArgument, match="float8='yes' must be a bool"):
        sgs.dtypes(float8="yes")


@FEW
@given(sgs.embedding_shapes(min_tokens=2, max_tokens=9, min_hidden=3, max_hidden=70))
def test_embedding_shapes_within_bounds(shape):
    assert 2 <= shape.tokens <= 9 and 3 <= shape.hidden <= 70 and shape.layout in sgs.LAYOUTS


def test_embedding_shapes_reach_awkward_hidden_sizes_and_every_layout():
    reach(sgs.embedding_shapes(max_hidden=8192), lambda s: s.hidden % 8 and s.hidden > 4000)
    for layout in sgs.LAYOUTS:
        reach(sgs.embedding_shapes(), lambda s, want=layout: s.layout == want)
    with pytest.raises(InvalidArgument, match=r"^embedding_shapes\(\): min_hidden=0 must be in"):
        sgs.embedding_shapes(min_hidden=0)
    with pytest.raises(InvalidArgument, match=r"layouts has unknown value\(s\) \['diagonal'\]"):
        sgs.embedding_shapes(layouts=["diagonal"])


def test_mask_placements_offer_only_what_the_machine_has():
    if not CUDA:
        assert find(sgs.mask_placements(), lambda p: True) == "cpu"
        with pytest.raises(NoSuchExample):
            find(sgs.mask_placements(), lambda p: p != "cpu")
        with pytest.raises(InvalidArgument, match=r"needs CUDA for \['cuda'\]"):
            sgs.mask_placements(placements=("cpu", "cuda"))
    else:
        find(sgs.mask_placements(), lambda p: p == "cuda")
        find(sgs.mask_placements(), lambda p: p == "cpu_pinned")
    assert find(sgs.mask_placements(placements="cpu"), lambda p: True) == "cpu"
    with pytest.raises(InvalidArgument, match=r"placements has unknown value\(s\) \['gpu'\]"):
        sgs.mask_placements(placements=["gpu"])


# ---------------------------------------------------------------------------------------------
# global modes

def test_deterministic_algorithms_restores_previous_settings():
    torch.use_deterministic_algorithms(False)
    with sgs.deterministic_algorithms(True, warn_only=True):
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        with sgs.deterministic_algorithms(False):
            assert not torch.are_deterministic_algorithms_enabled()
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
    assert not torch.are_deterministic_algorithms_enabled()
    assert not torch.is_deterministic_algorithms_warn_only_enabled()


def test_deterministic_algorithms_restores_on_exceptions():
    torch.use_deterministic_algorithms(False)
    with pytest.raises(ZeroDivisionError):
        with sgs.deterministic_algorithms(True):
            1 / 0
    assert not torch.are_deterministic_algorithms_enabled()


def test_global_modes_draw_both_and_apply():
    on = find(sgs.global_modes(), lambda m: m.deterministic)
    off = find(sgs.global_modes(), lambda m: not m.deterministic)
    with on.apply():
        assert torch.are_deterministic_algorithms_enabled()
    with off.apply():
        assert not torch.are_deterministic_algorithms_enabled()
    assert find(sgs.global_modes(deterministic=True), lambda m: True).deterministic
    with pytest.raises(InvalidArgument, match="deterministic='on' must be a bool"):
        sgs.global_modes(deterministic="on")


# ---------------------------------------------------------------------------------------------
# merge_inputs

@FEW
@given(sgs.merge_inputs(max_tokens=30, max_hidden=20, mm_dtype=st.one_of(st.none(), sgs.dtypes()),
                        extra_rows=st.integers(-2, 2)))
def test_merge_inputs_are_consistent(inp):
    x, mask = inp.inputs_embeds, inp.is_multimodal
    assert x.shape == (inp.tokens, inp.hidden) and x.dtype == inp.dtype and x.device == inp.device
    assert mask.dtype == torch.bool and mask.shape == (inp.tokens,)
    assert inp.n_slots == int(mask.sum())
    assert inp.n_mm_rows == max(0, inp.n_slots + inp.extra_rows) and inp.n_mm_rows >= 0
    rows = sum(t.reshape(-1, inp.hidden).shape[0] for t in inp.mm_list())
    assert rows == inp.n_mm_rows
    assert all(t.dtype == inp.mm_dtype and t.device == inp.device for t in inp.mm_list())
    assert x.untyped_storage().data_ptr() == inp.base.untyped_storage().data_ptr()
    if inp.layout == "contiguous":
        assert x.is_contiguous()
    elif inp.layout == "row_padded" and inp.tokens > 1:
        assert x.stride() == (inp.base.shape[1], 1) and inp.base.shape[1] > inp.hidden
    elif inp.layout == "strided_rows" and inp.tokens > 1:
        assert x.stride() == (2 * inp.hidden, 1)
    elif inp.layout == "transposed" and inp.tokens > 1 and inp.hidden > 1:
        assert x.stride() == (1, inp.tokens)
    if inp.mask_placement == "cpu_pinned":
        assert mask.is_pinned()
    assert len(repr(inp)) < 400 and "tensor(" not in repr(inp)


@FEW
@given(sgs.merge_inputs(max_tokens=12, max_hidden=9))
def test_fresh_copies_bits_and_layout_but_not_memory(inp):
    copy = inp.fresh()
    assert copy.inputs_embeds.stride() == inp.inputs_embeds.stride()
    assert torch.equal(_int_bits(copy.base), _int_bits(inp.base))
    if inp.base.numel():
        flat = _int_bits(copy.base).view(-1)
        flat[0] = flat[0] ^ 1
        assert _int_bits(inp.base).view(-1)[0] != flat[0], "fresh() shares memory"


def test_merge_inputs_reach_lists_empty_lists_casts_and_mismatches():
    reach(sgs.merge_inputs(), lambda i: i.mm_container == "list" and len(i.mm_embeds) > 1)
    reach(sgs.merge_inputs(), lambda i: i.mm_container == "list" and len(i.mm_embeds) == 0)
    reach(sgs.merge_inputs(), lambda i: i.mm_container == "list"
          and any(t.dim() == 3 for t in i.mm_embeds))
    reach(sgs.merge_inputs(mm_dtype=sgs.dtypes()), lambda i: i.mm_dtype != i.dtype)
    reach(sgs.merge_inputs(extra_rows=-1), lambda i: i.extra_rows == -1)


def test_random_bits_cover_special_values_and_are_reproducible():
    a = sgs.random_bits((64, 64), torch.float32, "cpu", seed=7)
    assert torch.equal(_int_bits(a), _int_bits(sgs.random_bits((64, 64), torch.float32, "cpu", 7)))
    assert not torch.equal(_int_bits(a), _int_bits(sgs.random_bits((64, 64), torch.float32,
                                                                   "cpu", 8)))
    h = sgs.random_bits((256, 256), torch.float16, "cpu", seed=1)
    assert torch.isnan(h).any() and torch.isinf(h).any() and (h < 0).any()


@pytest.mark.parametrize("kwargs, message", [
    (dict(device="tpu"), r"device='tpu' is not a torch device|device='tpu' must be cpu or cuda"),
    (dict(dtype=torch.int32), r"dtype=torch.int32 must be a floating torch.dtype"),
    (dict(extra_rows="many"), r"extra_rows='many' must be an int"),
    (dict(mm_container="dict"), r"mm_container has unknown value\(s\) \['dict'\]"),
    (dict(min_hidden=9000), r"min_hidden=9000 must be in \[1, 8192\]"),
    (dict(mask_patterns=["stripes"]), r"mask_patterns has unknown value"),
])
def test_merge_inputs_reject_bad_arguments(kwargs, message):
    with pytest.raises(InvalidArgument, match=r"^merge_inputs\(\): (" + message + ")"):
        sgs.merge_inputs(**kwargs)


@pytest.mark.skipif(CUDA, reason="checks the refusal of CUDA-only requests on a CPU machine")
def test_merge_inputs_refuse_cuda_without_cuda():
    with pytest.raises(InvalidArgument, match=r"device='cuda' needs CUDA"):
        sgs.merge_inputs(device="cuda")
    with pytest.raises(InvalidArgument, match=r"needs CUDA for \['cuda'\]"):
        sgs.merge_inputs(mask_placement="cuda")


def test_strategies_read_as_the_call_that_made_them():
    """hypothesis prints a strategy's repr; it names the public call, not an inner composite."""
    assert repr(sgs.masks(max_tokens=8)) == "masks(max_tokens=8)"
    assert repr(sgs.merge_inputs(device="cpu", max_tokens=4)) == "merge_inputs(device='cpu', max_tokens=4)"
    assert repr(sgs.embedding_shapes()) == "embedding_shapes()"
