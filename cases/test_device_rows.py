"""Variant 6's machinery (``cases/device_rows.py``) in the parts a CPU can check, and on the
GPU the parts only a GPU can: staging slots never overwritten while a copy is in flight, a
merge per stream, no host wait.

CPU: the row map is checked against a count written here (the number of earlier multimodal
tokens), across launch geometries small enough to force many splits and chunks; the launch
geometry against its invariants; the staging ring's bookkeeping with fake events (a CPU has
no CUDA events: the fake says when a copy has "completed"); the cache key per stream. The
merge results themselves, CPU fallback included, are checked by ``cases/test_merge.py``
against ``reference_merge``.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import syncguard
from cases import device_rows
from cases.device_rows import PinnedRing, cache_key, device_rows_config, row_map
from cases.merge import VARIANTS, bits, reference_merge, triton_available

CUDA = torch.cuda.is_available()
ROOT = Path(__file__).resolve().parents[1]
needs_cuda_triton = pytest.mark.skipif(
    not (CUDA and triton_available()),
    reason="needs CUDA and triton: the Triton kernel, pinned staging and streams are GPU-only")


def _earlier_count(mask: list[bool]) -> list[int]:
    out, seen = [], 0
    for m in mask:
        out.append(seen if m else -1)
        seen += m
    return out


# geometries from one split of one chunk to ~19 splits of 16-token chunks at 300 tokens
_HIDDEN = st.sampled_from([1, 3, 100, 512, 700, 4096])
_PROGRAMS = st.sampled_from([1, 2, 7, 64, 528])


@given(mask=st.lists(st.booleans(), min_size=1, max_size=300), hidden=_HIDDEN,
       element_size=st.sampled_from([1, 2, 4, 8]), programs=_PROGRAMS)
def test_row_map_counts_earlier_multimodal_tokens(mask, hidden, element_size, programs):
    cfg = device_rows_config(len(mask), hidden, element_size, programs)
    got = row_map(torch.tensor(mask, dtype=torch.bool), cfg).tolist()
    assert got == _earlier_count(mask), cfg


def test_row_map_across_many_splits_and_ragged_ends():
    """A fixed example that needs the split prefix, the chunk carry and a ragged last split."""
    gen = torch.Generator().manual_seed(3)
    mask = torch.rand(299, generator=gen) < 0.5
    many_splits = device_rows_config(299, 4096, 2, 528)
    assert many_splits.splits > 10 and many_splits.splits * many_splits.tokens_per_split > 299
    many_chunks = device_rows_config(299, 4096, 2, 1)
    assert many_chunks.splits == 1 and many_chunks.tokens_per_split // many_chunks.chunk > 10
    three = device_rows_config(299, 4096, 2, 24)
    assert three.splits == 3 and three.tokens_per_split // three.chunk > 3
    for cfg in (many_splits, many_chunks, three):
        assert row_map(mask, cfg).tolist() == _earlier_count(mask.tolist()), cfg


@given(tokens=st.integers(1, 300_000), hidden=st.integers(1, 20_000),
       element_size=st.sampled_from([1, 2, 4, 8]), programs=st.integers(1, 2000))
def test_launch_geometry_covers_every_token_and_column_once(tokens, hidden, element_size,
                                                            programs):
    cfg = device_rows_config(tokens, hidden, element_size, programs)
    assert cfg.tokens_per_split % cfg.chunk == 0, "a chunk would straddle two programs"
    assert cfg.splits * cfg.tokens_per_split >= tokens > (cfg.splits - 1) * cfg.tokens_per_split
    assert cfg.h_blocks * cfg.block_h >= hidden > (cfg.h_blocks - 1) * cfg.block_h
    for p in (cfg.chunk, cfg.block_h):  # tl.arange needs powers of two, at least 16
        assert p >= 16 and p & (p - 1) == 0
    assert cfg.chunk * cfg.block_h * element_size <= max(16384, 16 * 16 * element_size)
    assert cfg.grid == (cfg.splits, cfg.h_blocks) and cfg.num_warps in (4, 8)


def test_launch_geometry_rejects_nonsense_in_one_line():
    with pytest.raises(ValueError, match="need tokens >= 1"):
        device_rows_config(0, 8, 2)
    with pytest.raises(ValueError, match="element size"):
        device_rows_config(8, 8, 3)


class _FakeEvent:
    """Stands in for torch.cuda.Event on a CPU: ``done`` says whether the kernel completed."""

    def __init__(self):
        self.done, self.records = True, 0

    def query(self):
        return self.done

    def record(self, stream=None):
        self.records += 1
        self.done = False


def _ring():
    return PinnedRing("cpu", pin=False, make_event=_FakeEvent)


def test_a_slot_is_reused_only_after_its_kernel_completed():
    ring = _ring()
    a = ring.take(10)
    ring.release(a, None)
    b = ring.take(10)
    assert b is not a, "a slot still being read by the device was handed out again"
    ring.release(b, None)
    a.event.done = True
    assert ring.take(10) is a
    assert len(ring.slots) == 2 and a.dev.numel() >= 10 and a.host.numel() >= 10


def test_a_taken_slot_is_busy_until_released_even_if_its_event_says_done():
    """Between take and release (the kernel not yet enqueued), the event still reports the
    previous use: a second caller must get another slot."""
    ring = _ring()
    a = ring.take(10)
    assert a.event.query() and ring.take(10) is not a
    ring.release(a, None)
    assert a.event.records == 1 and not a.busy


def test_the_ring_grows_while_the_host_runs_ahead_and_never_waits():
    ring = _ring()
    taken = []
    for _ in range(5):
        slot = ring.take(100)
        ring.release(slot, None)
        taken.append(slot)
    assert len({id(s) for s in taken}) == 5 and len(ring.slots) == 5
    for s in taken:
        s.event.done = True
    assert ring.take(100) in taken and len(ring.slots) == 5


def test_a_free_slot_too_small_is_replaced_a_busy_one_is_not():
    ring = _ring()
    small = ring.take(10)
    cap = small.host.numel()
    ring.release(small, None)  # in flight
    big = ring.take(cap + 1)
    assert big is not small and big.host.numel() >= cap + 1 and big.dev.numel() >= cap + 1
    assert small in ring.slots, "a slot in flight was dropped"
    ring.release(big, None)
    small.event.done = True
    again = ring.take(cap * 4)
    assert again.host.numel() >= cap * 4 and again.dev.numel() >= cap * 4
    assert small not in ring.slots and again.event is small.event, "the event is kept"
    assert again.fresh, "a new device buffer must be marked fresh (its first copy waits)"


def test_cache_key_separates_devices_and_streams():
    s1, s2 = types.SimpleNamespace(cuda_stream=11), types.SimpleNamespace(cuda_stream=22)
    d0, d1 = torch.device("cuda", 0), torch.device("cuda", 1)
    assert cache_key(d0, s1) == cache_key(d0, types.SimpleNamespace(cuda_stream=11))
    assert len({cache_key(d0, s1), cache_key(d0, s2), cache_key(d1, s1)}) == 3


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64,
                                   torch.float8_e4m3fn, torch.float8_e5m2], ids=str)
def test_cpu_fallback_is_a_bit_copy(dtype):
    """NaN payloads and -0.0 survive: the rows are copied as same-width integers."""
    x = torch.zeros(6, 3).to(dtype)
    mask = torch.tensor([0, 1, 0, 1, 1, 0], dtype=torch.bool)
    mm = torch.zeros(3, 3).to(dtype)
    ib = bits(mm)
    ib[0, 0] = 0x7D if dtype.itemsize == 1 else 0x7F55 if dtype.itemsize == 2 else -1
    ib[1, 1] = ib.new_tensor(1) << (8 * dtype.itemsize - 1)  # -0.0
    ref = reference_merge(x, mask, mm)
    device_rows.scatter_cpu(mm, mask, x)
    assert torch.equal(bits(x), bits(ref))


_HAS_TRITON = importlib.util.find_spec("triton") is not None
_INTERPRET = textwrap.dedent("""
    import torch
    from cases import device_rows
    from cases.merge import bits, reference_merge
    bad = []
    for tokens, hidden, dtype, p, programs, strided in [
            (1, 1, torch.float32, 0.5, 528, False), (17, 3, torch.bfloat16, 0.4, 528, False),
            (300, 700, torch.float16, 0.4, 528, False), (299, 4096, torch.bfloat16, 0.5, 24, False),
            (299, 4096, torch.bfloat16, 0.5, 1, False),
            (5000, 20, torch.float8_e4m3fn, 0.4, 528, False),
            (9000, 40, torch.float64, 0.7, 64, False), (64, 33, torch.float32, 0.5, 528, True),
            (40, 5, torch.float32, 1.0, 528, False)]:
        g = torch.Generator().manual_seed(tokens)
        mask = torch.rand(tokens, generator=g) < p
        x = (torch.randn(hidden, tokens, generator=g).to(dtype).t() if strided
             else torch.randn(tokens, hidden, generator=g).to(dtype))
        mm = torch.randn(int(mask.sum()), hidden, generator=g).to(dtype)
        ref = reference_merge(x, mask, mm)
        staged = torch.zeros(tokens + 100, dtype=torch.uint8)  # longer, as the cached buffer
        staged[:tokens] = mask.view(torch.uint8)
        device_rows.launch(device_rows.kernel(), mm, staged, x, programs)
        if not torch.equal(bits(x), bits(ref)):
            bad.append((tokens, hidden, str(dtype), programs, strided))
    print("BAD", bad) if bad else print("ALL_OK")
""")


def _triton_version() -> tuple[int, int]:
    import importlib.metadata as md

    return tuple(int(x) for x in md.version("triton").split(".")[:2])


# Measured at 973d48e (reports/archive/973d48e/gpu-2.11.0/cases-2.11.0.log, ../gpu-2.9.1/): the interpreter of
# triton 3.5.1 and 3.6.0 cannot take a runtime argument as a range() bound under numpy 2
# ("only 0-dimensional arrays can be converted to Python scalars"); 3.7.1 and 3.8.0 run it.
INTERPRETER_RUNS_RANGE_OVER_ARGS = (3, 7)


@pytest.mark.skipif(not _HAS_TRITON, reason="needs triton: its interpreter (TRITON_INTERPRET=1) "
                                            "runs the kernel on CPU tensors")
def test_the_kernel_in_tritons_interpreter_matches_the_reference():
    """The real kernel and ``launch`` (argument order, geometry), run by Triton's interpreter
    on CPU tensors, in a child process (the variable is read when triton is imported): one
    program, many splits, many chunks per split, float8 and float64, a strided destination,
    every token multimodal. Checked by hand with triton 3.9 here; CUDA still decides."""
    if _triton_version() < INTERPRETER_RUNS_RANGE_OVER_ARGS:
        pytest.skip(f"triton {'.'.join(map(str, _triton_version()))}'s interpreter cannot run "
                    "range() over a runtime argument (numpy 2); the compiled kernel is tested")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, "-c", _INTERPRET], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "ALL_OK" in proc.stdout, out[-3000:]


# ---------------------------------------------------------------------------------------------
# GPU

def _merge():
    return VARIANTS["triton_device_rows"].fn


@pytest.mark.gpu
@needs_cuda_triton
def test_staging_slots_survive_the_host_running_ahead():
    """With the GPU busy, many merges with different masks are queued before any copy runs:
    if a staging slot were rewritten while in flight, an earlier merge would read a later
    mask. Every result must equal its own reference, and the ring must have grown."""
    gen = torch.Generator().manual_seed(1)
    cases = []
    with syncguard.allow("test setup: inputs and references"):
        for _ in range(16):
            mask = torch.rand(3000, generator=gen) < 0.5
            x = torch.randn(3000, 64, device="cuda")
            mm = torch.randn(int(mask.sum()), 64, device="cuda")
            cases.append((x, mask, mm, reference_merge(x, mask, mm)))
        torch.cuda.synchronize()
        _merge()(torch.zeros(8, 64, device="cuda"), torch.ones(8, dtype=torch.bool),
                 torch.zeros(8, 64, device="cuda"))  # compile outside the timed queue
        torch.cuda.synchronize()
    torch.cuda._sleep(int(2e8))  # ~100 ms of GPU work ahead of the merges
    with syncguard.forbid():
        for x, mask, mm, _ in cases:
            _merge()(x, mask, mm)
    state = device_rows.cached_states()[cache_key(torch.device("cuda", torch.cuda.current_device()),
                                                  torch.cuda.current_stream())]
    assert len(state.ring.slots) > 1, "the host never ran ahead: the test proves nothing"
    with syncguard.allow("test: compare"):
        for i, (x, _, _, ref) in enumerate(cases):
            assert torch.equal(bits(x.cpu()), bits(ref)), f"merge {i} read another mask"


@pytest.mark.gpu
@needs_cuda_triton
def test_each_stream_gets_its_own_buffers_and_results_stay_right():
    with syncguard.allow("test setup"):
        side = torch.cuda.Stream()
        mask = torch.tensor([1, 0, 1, 1, 0, 0, 1, 0] * 64, dtype=torch.bool)
        x1, x2 = torch.randn(512, 40, device="cuda"), torch.randn(512, 40, device="cuda")
        mm = torch.randn(int(mask.sum()), 40, device="cuda")
        r1, r2 = reference_merge(x1, mask, mm), reference_merge(x2, mask, mm)
        torch.cuda.synchronize()
    with syncguard.forbid():
        _merge()(x1, mask, mm)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            _merge()(x2, mask, mm)
        torch.cuda.current_stream().wait_stream(side)
    keys = set(device_rows.cached_states())
    dev = torch.device("cuda", torch.cuda.current_device())
    assert {cache_key(dev, torch.cuda.current_stream()), cache_key(dev, side)} <= keys
    with syncguard.allow("test: compare"):
        assert torch.equal(bits(x1.cpu()), bits(r1)) and torch.equal(bits(x2.cpu()), bits(r2))


@pytest.mark.gpu
@needs_cuda_triton
@pytest.mark.parametrize("tokens,hidden", [(1, 1), (17, 3), (4096, 2048), (70000, 130)])
def test_kernel_matches_the_reference_across_geometries(tokens, hidden):
    """Sizes that give one program, ragged chunks, many splits and a non-power-of-two hidden;
    strided (non-unit hidden stride) destination included."""
    with syncguard.allow("test setup"):
        gen = torch.Generator().manual_seed(tokens)
        mask = torch.rand(tokens, generator=gen) < 0.3
        base = torch.randn(hidden, tokens, device="cuda", dtype=torch.bfloat16)
        for x in (torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16), base.t()):
            mm = torch.randn(int(mask.sum()), hidden, device="cuda", dtype=torch.bfloat16)
            ref = reference_merge(x, mask, mm)
            _merge()(x, mask, mm)
            assert torch.equal(bits(x.cpu()), bits(ref)), (tokens, hidden, x.stride())


@pytest.mark.gpu
@needs_cuda_triton
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_a_merge_on_another_device_than_the_current_one():
    """Buffers keyed by that device, the kernel launched there (Triton launches on the current
    device: ``launch`` switches)."""
    with syncguard.allow("test setup"):
        mask = torch.tensor([0, 1, 1, 0, 1] * 100, dtype=torch.bool)
        x = torch.randn(500, 24, device="cuda:1")
        mm = torch.randn(int(mask.sum()), 24, device="cuda:1")
        ref = reference_merge(x, mask, mm)
        torch.cuda.synchronize(1)
    with torch.cuda.device(0), syncguard.forbid():
        _merge()(x, mask, mm)
    assert any(key[0] == 1 for key in device_rows.cached_states())
    with syncguard.allow("test: compare"):
        assert torch.equal(bits(x.cpu()), bits(ref))


@pytest.mark.gpu
@needs_cuda_triton
@pytest.mark.parametrize("deterministic", [False, True], ids=["default", "deterministic"])
def test_a_fresh_slot_is_written_after_the_streams_earlier_work(deterministic):
    """A new stream gets new slots. Its device buffers come from the allocator in the stream's
    order and, in deterministic mode, are filled by a kernel queued there, behind ~100 ms of
    sleep: the side-stream copy of the mask must wait for them, or the fill lands on the mask
    (and the merge writes the wrong rows)."""
    from syncguard.strategies import deterministic_algorithms

    with syncguard.allow("test setup"):
        fresh = torch.cuda.Stream()
        mask = torch.tensor([1, 1, 0, 1, 0, 0, 1, 0] * 128, dtype=torch.bool)
        x = torch.randn(1024, 48, device="cuda")
        mm = torch.randn(int(mask.sum()), 48, device="cuda")
        ref = reference_merge(x, mask, mm)
        _merge()(torch.zeros(8, 48, device="cuda"), torch.ones(8, dtype=torch.bool),
                 torch.zeros(8, 48, device="cuda"))  # compile on the default stream
        torch.cuda.synchronize()
    fresh.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(fresh), deterministic_algorithms(deterministic), syncguard.forbid():
        torch.cuda._sleep(int(2e8))
        _merge()(x, mask, mm)
    torch.cuda.current_stream().wait_stream(fresh)
    with syncguard.allow("test: compare"):
        assert torch.equal(bits(x.cpu()), bits(ref))
