"""The predictor's stand-in for torch's device APIs (syncguard/predict/shim.py and the fake*.py
modules it installs) beyond streams and synchronize: ``torch.accelerator``, device selection
and ordinals, the memory queries, RNG seeding, NVTX, CUDA graphs and ``torch.compile``'s CUDA-graph modes.

Expected answers are what torch says on a real one-GPU machine (an H200 with torch 2.8.0, 2.11.0
and 2.14.1, all alike: ``reports/gpu/<v>/device-apis-<v>.log``, tools/probe_device_apis.py):
``torch.accelerator`` reports
``(True, device('cuda'), device('cuda'), 1, 0)`` for is_available, current_accelerator,
current_accelerator(check_available=True), device_count, current_device_index; ``cuda:1``
raises ``torch.AcceleratorError`` "CUDA error: invalid device ordinal"; the device queries raise
``AssertionError("Invalid device id")``; ``current_stream(1)`` raises "Device index value 1 is
out of index range [0, 1)"; or the measured kinds of the committed H200 corpus runs, never the
predictor's own table. What a CPU build cannot model must be "not predicted", never clean.
"""
from __future__ import annotations

import os
import threading
import types

import pytest
import torch

from overlap import overlapping
from syncguard.predict import CudaStandIn, predicting
from rulelearn.derive import measured_kinds
from syncguard.predict.tensors import unwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU_BUILD = not torch.backends.cuda.is_built()


def measured(version: str, snippet: str) -> list[str]:
    return measured_kinds(ROOT, version, f"corpus/{snippet}")


def _names(module) -> dict:
    return dict(vars(module))


# ---------------------------------------------------------------------------------------------
# torch.accelerator agrees with the shimmed torch.cuda

def test_torch_accelerator_answers_as_one_gpu_inside_a_block():
    """Found by a reviewer: inside a block torch.accelerator said there was no accelerator."""
    with predicting():
        acc = torch.accelerator
        assert acc.is_available() is True
        assert acc.current_accelerator() == torch.device("cuda")
        assert acc.current_accelerator(check_available=True) == torch.device("cuda")
        assert acc.device_count() == 1
        assert acc.current_device_index() == 0
        acc.set_device_index(0)
        with acc.device_index(0):
            assert torch.zeros(2, device=acc.current_accelerator()).is_cuda


@pytest.mark.skipif(not CPU_BUILD, reason="a CUDA build has an accelerator outside the block")
def test_torch_accelerator_says_no_accelerator_again_after_the_block():
    with predicting():
        pass
    assert torch.accelerator.is_available() is False
    assert torch.accelerator.current_accelerator() is None
    assert torch.accelerator.device_count() == 0


def test_every_patched_module_is_restored_exactly_after_nested_blocks_and_an_exception():
    import torch.cuda.memory
    import torch.cuda.nvtx
    import torch.utils.data._utils.pin_memory as pin

    modules = [torch, torch._C, torch.cuda, torch.cuda.memory, torch.cuda.nvtx, torch.accelerator,
               pin]
    before = [_names(m) for m in modules]
    with pytest.raises(ZeroDivisionError):
        with predicting():
            with predicting():
                assert torch.accelerator.is_available()
            assert torch.accelerator.is_available()  # the outer block still holds the shim
            1 / 0
    after = [_names(m) for m in modules]
    for m, b, a in zip(modules, before, after):
        added = [k for k in a.keys() - b.keys() if not isinstance(a[k], types.ModuleType)]
        assert not added and b.keys() <= a.keys(), (m.__name__, added, b.keys() - a.keys())
        changed = [k for k in b if a[k] is not b[k]]  # (a submodule torch imported is no change)
        assert not changed, (m.__name__, changed)


def test_overlapping_blocks_on_two_threads_keep_torch_accelerator_until_the_last_closes():
    """A open, B open, A close, B asks, B close: the shim is shared and reference-counted."""
    original = torch.accelerator.is_available
    assert overlapping(predicting, lambda: torch.accelerator.is_available()) is True
    assert torch.accelerator.is_available is original


@pytest.mark.parametrize("workers", [0, 2])
def test_a_pinned_dataloader_batch_uploaded_non_blocking_is_predicted_as_pinned(workers):
    """Found by a reviewer: DataLoader(pin_memory=True) asks torch.accelerator, which said no
    accelerator, so batches were not pinned and every ``non_blocking`` upload of one was
    predicted as a pageable copy. With workers, pinning runs on the loader's own thread."""
    ds = torch.utils.data.TensorDataset(torch.arange(16.0).reshape(8, 2))
    with predicting("2.14.1") as p:
        loader = torch.utils.data.DataLoader(ds, batch_size=4, pin_memory=True,
                                             num_workers=workers)
        got = []
        for (batch,) in loader:
            assert batch.is_pinned()
            got.append(batch.to("cuda", non_blocking=True))
    assert [e.kind for e in p.syncs] == measured("2.14.1", "pinned_to_cuda_non_blocking") * 2
    assert not p.unmodelled, p.format()
    assert all(g.is_cuda for g in got) and torch.equal(unwrap(got[1]), ds.tensors[0][4:])


#: what torch.accelerator.get_device_capability raises on a GPU: CUDA's device guard
#: (c10/cuda/impl/CUDAGuardImpl.h of torch 2.13) does not override getDeviceCapability, so c10's
#: DeviceGuardImplInterface default answers (TORCH_CHECK false, this message). Measured on the
#: H200 for device 0 and for device 1 of a one-GPU machine alike, with torch 2.11.0 and 2.14.1
#: (reports/gpu/<v>/device-apis-<v>.log, at 9024dda); torch 2.8.0 has no such function.
NO_CUDA_CAPABILITY = "Backend doesn't support getting device capabilities."


@pytest.mark.skipif(not hasattr(torch.accelerator, "get_device_capability"),
                    reason="this torch has no torch.accelerator.get_device_capability")
def test_torch_accelerator_get_device_capability_answers_as_cuda_does():
    """Found by a reviewer: torch.cuda.get_device_capability was shimmed and the accelerator's
    was not, so inside a block (is_available() true) it raised the CPU build's "Cannot access
    accelerator device when none is available"."""
    with predicting() as p:
        for device in (None, 0, 1, "cuda", "cuda:0", torch.device("cuda", 0)):
            with pytest.raises(RuntimeError) as e:
                torch.accelerator.get_device_capability(device)
            assert str(e.value) == NO_CUDA_CAPABILITY, device
        with pytest.raises(ValueError, match="cpu doesn't match the current accelerator"):
            torch.accelerator.get_device_capability("cpu")  # torch's own device parser
    assert p.clean, p.format()


def test_torch_accelerator_synchronize_and_streams_agree_with_torch_cuda():
    with predicting("2.14.1") as p:
        s = torch.cuda.Stream()
        torch.accelerator.set_stream(s)
        assert torch.accelerator.current_stream() == s == torch.cuda.current_stream()
        with torch.cuda.Stream() as side:
            assert torch.cuda.current_stream() == side
        torch.accelerator.set_stream(torch.cuda.default_stream())
        assert torch.accelerator.current_stream().is_capturing() is False  # optimizers ask
        torch.accelerator.synchronize()
    assert [e.kind for e in p.syncs] == measured("2.14.1", "cuda_synchronize")


# ---------------------------------------------------------------------------------------------
# torch.cuda APIs that raised inside a block

def test_device_context_managers_select_device_zero_as_a_no_op():
    with predicting() as p:
        x = torch.ones(2, device="cuda")
        with torch.cuda.device(0):
            assert torch.cuda.current_device() == 0
            y = torch.ones(2, device="cuda") + x
        with torch.cuda.device_of(x):
            y = y * 2
        with torch.cuda.device(-1):  # torch: a negative index is a no-op
            pass
        torch.cuda.set_device(0)
    assert y.is_cuda and unwrap(y).tolist() == [4.0, 4.0]
    assert p.clean, p.format()


def test_seeding_and_nvtx_are_harmless_stand_ins():
    """NVTX ranges are host-side markers: no-ops here, with what a GPU without a profiler
    attached returns (push/pop -2, range_start 0, mark None)."""
    with predicting() as p:
        assert torch.cuda.seed() is None and torch.cuda.seed_all() is None
        assert isinstance(torch.cuda.initial_seed(), int)
        assert torch.cuda.nvtx.range_push("step") == -2
        assert torch.cuda.nvtx.range_pop() == -2
        assert torch.cuda.nvtx.mark("here") is None
        torch.cuda.nvtx.range_end(torch.cuda.nvtx.range_start("r"))
        with torch.cuda.nvtx.range("forward {}", 1):
            y = torch.ones(2, device="cuda") * 3
    assert y.is_cuda
    assert p.clean, p.format()


def test_seeding_cuda_makes_the_standins_draws_repeat():
    """Found by a reviewer: torch.cuda.manual_seed and kin were no-ops, and "cuda" draws came
    from the CPU generator, so seeding CUDA and drawing again gave other numbers, and any CPU
    draw in between shifted them. Seeding CUDA (also by torch.manual_seed, which seeds every
    device) and restoring its state repeat the draws within prediction mode, whatever the CPU
    generator does; the values are not a GPU's (Philox there), so none are compared."""
    def draws():
        torch.rand(3)  # the CPU generator moves on; "cuda" draws must not see it
        return [torch.randn(4, device="cuda").tolist(),
                torch.nn.functional.dropout(torch.ones(16, device="cuda"), 0.5).tolist(),
                torch.empty(3, device="cuda").uniform_().tolist(),
                torch.randint(0, 1000, (4,), device="cuda").tolist()]

    with predicting():
        torch.cuda.manual_seed(7)
        first = draws()
        torch.cuda.manual_seed_all(7)
        assert draws() == first
        torch.manual_seed(7)
        assert draws() == first
        state = torch.cuda.get_rng_state()
        after = draws()
        torch.cuda.set_rng_state(state)
        assert draws() == after != first
        torch.cuda.manual_seed(8)
        assert draws() != first
        assert torch.cuda.initial_seed() == 8


def test_memory_queries_answer_or_say_they_were_not_predicted():
    """mem_get_info is a CUDA runtime call no committed run measured: not predicted, with a
    plausible answer; the allocator's own statistics are host-side counters."""
    with predicting() as p:
        free, total = torch.cuda.mem_get_info()
        assert isinstance(free, int) and isinstance(total, int) and 0 < free <= total
        summary = torch.cuda.memory_summary()
        assert isinstance(summary, str) and "memory summary" in summary
        assert torch.cuda.memory_stats().get("allocated_bytes.all.current", 0) == 0
        assert torch.cuda.memory_reserved() == 0 == torch.cuda.max_memory_reserved()
    assert [u.what for u in p.unmodelled] == ["torch.cuda.mem_get_info"]
    assert "not predicted" in str(p.unmodelled[0]) and "mem_get_info" in p.unmodelled[0].why


def test_a_cuda_graph_runs_and_the_prediction_says_it_does_not_cover_it():
    """Found by a reviewer: torch.cuda.CUDAGraph() raised inside a block."""
    with predicting() as p:
        static_in = torch.ones(4, device="cuda")
        g = torch.cuda.CUDAGraph()
        assert isinstance(g, torch.cuda.CUDAGraph)
        with torch.cuda.graph(g):
            assert torch.cuda.is_current_stream_capturing()
            static_out = static_in * 2
        g.replay()
        assert not torch.cuda.is_current_stream_capturing()
        torch.cuda.graph_pool_handle()
    assert static_out.is_cuda and unwrap(static_out).tolist() == [2.0] * 4
    assert not p.clean
    graphs = [u for u in p.unmodelled if "CUDA graph" in u.why]
    assert [u.what for u in graphs] == ["torch.cuda.graph", "torch.cuda.CUDAGraph.replay"]
    assert all("does not cover" in u.why for u in graphs)
    assert "not predicted" in (p.to_report().reason or "")
    # entering torch.cuda.graph synchronizes the device first, as torch's own does (measured:
    # library/cuda_graph_capture's ground truth has a cudaDeviceSynchronize)
    assert "device_sync" in [e.kind for e in p.syncs]


def test_make_graphed_callables_runs_eagerly_and_is_not_predicted():
    with predicting() as p:
        lin = torch.nn.Linear(4, 4).cuda()
        fn = torch.cuda.make_graphed_callables(lin, (torch.randn(2, 4, device="cuda"),))
        out = fn(torch.randn(2, 4, device="cuda"))
    assert out.is_cuda and out.shape == (2, 4)
    assert any("make_graphed_callables" in u.what for u in p.unmodelled), p.format()


def test_torch_accelerator_graph_is_not_predicted():
    if not hasattr(torch.accelerator, "Graph"):
        pytest.skip("this torch has no torch.accelerator.Graph")
    with predicting() as p:
        x = torch.zeros(2, device="cuda")
        g = torch.accelerator.Graph()
        with g:
            x += 1
        g.replay()
    assert any("CUDA graph" in u.why for u in p.unmodelled), p.format()


@pytest.mark.parametrize("how", ["function", "decorator", "module", "Module.compile",
                                 "options"])
def test_compile_with_cuda_graphs_is_not_predicted_at_each_call(how):
    """Found by a reviewer: torch.compile(mode="reduce-overhead") ran eagerly and was predicted
    clean; a GPU captures and replays the compiled code in CUDA graphs."""
    def f(x):
        return (x * 2).sum()

    with predicting() as p:
        x = torch.randn(8, device="cuda")
        if how == "function":
            g = torch.compile(f, mode="reduce-overhead")
        elif how == "decorator":
            g = torch.compile(mode="max-autotune")(f)
        elif how == "options":
            g = torch.compile(f, options={"triton.cudagraphs": True})
        else:
            g = torch.nn.Linear(8, 1).cuda()
            if how == "module":
                g = torch.compile(g, mode="reduce-overhead")
            else:
                g.compile(mode="reduce-overhead")
        before = len(p.unmodelled)
        out = g(x)
        assert len(p.unmodelled) == before + 1
        g(x)
    assert out.is_cuda
    assert len([u for u in p.unmodelled if "CUDA graphs" in u.why]) == 2, p.format()
    assert all("does not cover" in u.why for u in p.unmodelled)


def test_compile_without_cuda_graphs_is_left_as_it_was():
    with predicting() as p:
        x = torch.randn(8, device="cuda")
        torch.compile(lambda t: (t * 2).sum(), mode="max-autotune-no-cudagraphs")(x)
        torch.compile(lambda t: t + 1)(x)
    assert not [u for u in p.unmodelled if "CUDA graphs" in u.why], p.format()


def test_cuda_autocast_is_not_predicted_because_its_dtypes_differ_from_a_gpu():
    """Found by a reviewer: torch.autocast("cuda") had no effect on stand-ins (a matmul stayed
    float32 where a GPU computes float16, per torch's CUDA autocast op list) and the block was
    predicted clean. CPU autocast and a disabled one are no CUDA autocast: left alone."""
    with predicting() as p:
        a = torch.ones(2, 2, device="cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            a @ a
        with pytest.warns(FutureWarning):
            legacy = torch.cuda.amp.autocast()
        with legacy:
            a @ a
        with torch.autocast("cuda", enabled=False), torch.autocast("cpu"):
            a @ a
    assert [u.what for u in p.unmodelled] == ["torch.autocast"] * 2, p.format()
    assert all("autocast" in u.why and "float16" in u.why for u in p.unmodelled)
    assert "not predicted" in (p.to_report().reason or "")


def test_cuda_autocast_turned_on_directly_is_not_predicted_either():
    """Found by a reviewer: torch.set_autocast_enabled("cuda", True), called directly rather
    than through torch.autocast, turns on the same CUDA autocast, which the stand-ins' CPU
    kernels never reach (a GPU would compute the matmul in float16), yet the block was predicted
    clean. Both forms this torch takes are caught, (device_type, enabled) and the legacy
    (enabled), which means CUDA; CPU autocast and turning it off are left alone, torch.autocast
    is still reported once per entry, and outside a block the call is torch's own."""
    with predicting() as p:
        a = torch.ones(2, 2, device="cuda")
        try:
            torch.set_autocast_enabled("cuda", True)
            a @ a
            torch.set_autocast_enabled("cuda", False)
            torch.set_autocast_enabled(True)
            a @ a
            torch.set_autocast_enabled(False)
            torch.set_autocast_enabled(device_type="cuda", enabled=True)
            with torch.autocast("cuda"):  # nested: its exit restores "on", no second report
                a @ a
            torch.set_autocast_enabled("cuda", False)
            torch.set_autocast_enabled("cpu", True)
            torch.set_autocast_enabled("cpu", False)
        finally:
            torch.set_autocast_enabled("cuda", False)
            torch.set_autocast_enabled("cpu", False)
    assert [u.what for u in p.unmodelled] == ["torch.set_autocast_enabled"] * 3 + [
        "torch.autocast"], p.format()
    assert all("autocast" in u.why and "float16" in u.why for u in p.unmodelled)
    assert "not predicted" in (p.to_report().reason or "")
    torch.set_autocast_enabled("cuda", True)  # outside: torch's own, nothing to report to
    try:
        assert torch.is_autocast_enabled("cuda")
    finally:
        torch.set_autocast_enabled("cuda", False)


# ---------------------------------------------------------------------------------------------
# One device: cuda:1 does not exist

ORDINAL = "CUDA error: invalid device ordinal"


@pytest.mark.parametrize("call", [
    'torch.ones(2, device="cuda:1")',
    'torch.ones(2).to("cuda:1")',
    'torch.ones(2).cuda(1)',
    'torch.ones(2, device="cuda").to("cuda:1")',
    'torch.empty(2, device=torch.device("cuda", 5))',
    'torch.tensor([1.0], device="cuda:1")',
    'torch.zeros_like(torch.ones(2, device="cuda"), device="cuda:1")',
    'torch.nn.Linear(2, 2).to("cuda:1")',
    'torch.cuda.set_device(1)',
    'torch.cuda.device(1).__enter__()',
    'torch.cuda.Stream(device=1)',
    'torch.cuda.synchronize(1)',
    'torch.accelerator.set_device_index(1)',
])
def test_a_device_beyond_device_count_raises_as_on_a_one_gpu_machine(call):
    """Found by a reviewer: with one device, cuda:1 "existed" inside a block."""
    with predicting():
        assert torch.cuda.device_count() == 1
        with pytest.raises(RuntimeError, match=ORDINAL) as e:
            eval(call)
    if hasattr(torch, "AcceleratorError"):
        assert isinstance(e.value, torch.AcceleratorError)
    assert "\n" not in str(e.value)
    assert "cuda:1" in str(e.value) or "cuda:5" in str(e.value)


@pytest.mark.parametrize("call", ["torch.cuda.get_device_properties(1)",
                                  "torch.cuda.get_device_name(1)",
                                  "torch.cuda.get_device_capability(1)"])
def test_device_queries_beyond_device_count_assert_as_torch_does(call):
    with predicting():
        with pytest.raises(AssertionError, match="Invalid device id"):
            eval(call)


def test_streams_of_a_missing_device_raise_as_torch_does():
    with predicting():
        with pytest.raises(RuntimeError, match=r"Device index value 1 is out of index range "
                                               r"\[0, 1\)"):
            torch.cuda.current_stream(1)


def test_device_zero_and_device_objects_still_work():
    with predicting() as p:
        assert torch.device("cuda", 2).index == 2  # naming a device is no error on a GPU
        assert torch.ones(1, device="cuda:0").device == torch.device("cuda", 0)
        assert torch.ones(1).cuda(0).is_cuda and torch.ones(1).to(0).is_cuda
        assert torch.cuda.get_device_properties(0).total_memory > 0
        torch.Generator(device="cuda:1")  # generators are made lazily: no error on a GPU
    assert not p.unmodelled, p.format()


# ---------------------------------------------------------------------------------------------
# Tensor methods that answered as the CPU

def test_new_tensor_on_a_standin_is_a_cuda_tensor_and_uploads():
    with predicting("2.14.1") as p:
        x = torch.ones(2, device="cuda")
        y = x.new_tensor([1.0, 2.0])
        assert isinstance(y, CudaStandIn) and y.device == torch.device("cuda", 0)
        assert y.dtype == x.dtype
        z = x.new_tensor([3], device="cpu")
        assert z.device.type == "cpu" and not isinstance(z, CudaStandIn)
    assert unwrap(y).tolist() == [1.0, 2.0]
    # on a GPU, data from Python is uploaded by a blocking copy (as torch.tensor(list, cuda))
    assert [e.kind for e in p.syncs] == measured("2.14.1", "tensor_from_list")


def test_type_of_a_standin_names_the_cuda_tensor_type():
    with predicting():
        x = torch.ones(2, device="cuda")
        assert x.type() == "torch.cuda.FloatTensor"
        assert x.type(torch.float64).type() == "torch.cuda.DoubleTensor"
        d = x.type("torch.cuda.DoubleTensor")
        assert d.is_cuda and d.dtype == torch.float64
        assert x.type(torch.float32) is x
        h = x.type("torch.FloatTensor")
        assert not isinstance(h, CudaStandIn) and h.device.type == "cpu"


# ---------------------------------------------------------------------------------------------
# A thread that is not inside the block sees torch as it is

#: what a CPU build of torch answers with no syncguard at all (torch 2.13.0+cpu, run by hand):
#: a value, or the exception's type and the start of its message
WITHOUT_SYNCGUARD = {
    "torch.cuda.is_available()": False,
    "torch.cuda.device_count()": 0,
    "torch.accelerator.is_available()": False,
    "torch.accelerator.device_count()": 0,
    "torch.accelerator.current_accelerator()": None,
    'torch.ones(2, device="cuda")': ("AssertionError", "Torch not compiled with CUDA enabled"),
    "torch.cuda.synchronize()": ("AssertionError", "Torch not compiled with CUDA enabled"),
    "torch.cuda.current_stream()": ("AssertionError", "Torch not compiled with CUDA enabled"),
    "torch.cuda.get_device_capability()": ("AssertionError",
                                           "Torch not compiled with CUDA enabled"),
    "torch.cuda.Stream()": ("RuntimeError", "torch.cuda.Stream requires CUDA support"),
    "torch.cuda.Event()": ("RuntimeError", "Tried to instantiate dummy base class Event"),
    "torch.cuda.CUDAGraph()": ("RuntimeError", "Tried to instantiate dummy base class CUDAGraph"),
    'torch.Generator(device="cuda")': ("RuntimeError", "Cannot get CUDA generator"),
    'torch.cuda.nvtx.range_push("x")': ("RuntimeError", "NVTX functions not installed"),
}


def _answers(exprs) -> dict:
    """Each expression's value, or its exception as (type name, message cut to the length of
    the expected message, whose start is what the table pins)."""
    out = {}
    for expr in exprs:
        try:
            out[expr] = eval(expr)
        except Exception as e:  # noqa: BLE001 - the answer is the exception
            expected = WITHOUT_SYNCGUARD[expr]
            cut = len(expected[1]) if isinstance(expected, tuple) else None
            out[expr] = (type(e).__name__, str(e)[:cut])
    return out


def _on_a_thread(fn):
    seen, errors = [], []

    def run():
        try:
            seen.append(fn())
        except BaseException as e:  # pragma: no cover - raised below
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    if errors:
        raise errors[0]
    return seen[0]


@pytest.mark.skipif(not CPU_BUILD, reason="the expected answers are a CPU build's")
def test_a_plain_thread_started_inside_a_block_sees_torch_as_without_syncguard():
    """Found by a reviewer: with a block open (as ``--syncguard-predict`` keeps one for the
    whole session), a user's own ``threading.Thread`` saw ``torch.cuda.is_available()`` true and
    then crashed on its first CUDA factory. It is not inside the block (no prediction runs
    there), so it gets torch's own answers, while the block's thread keeps the stand-ins."""
    assert _answers(WITHOUT_SYNCGUARD) == WITHOUT_SYNCGUARD  # the table is this torch's
    with predicting() as p:
        got = _on_a_thread(lambda: _answers(WITHOUT_SYNCGUARD))
        assert torch.cuda.is_available() and torch.accelerator.is_available()
        assert torch.ones(2, device="cuda").is_cuda
        assert isinstance(torch.cuda.Stream(), torch.cuda.Stream)
    assert got == WITHOUT_SYNCGUARD
    assert p.clean, p.format()


@pytest.mark.skipif(not CPU_BUILD, reason="the expected answers are a CPU build's")
def test_a_thread_sees_stand_ins_only_while_it_has_a_block_of_its_own_open():
    """A thread is inside when it opened a block itself (blocks are per thread; a thread
    started inside another's block does not inherit it)."""
    def own_block():
        before = torch.cuda.is_available()
        with predicting():
            inside = torch.cuda.is_available(), torch.ones(1, device="cuda").is_cuda
        return before, inside, torch.cuda.is_available()

    with predicting():
        assert _on_a_thread(own_block) == (False, (True, True), False)
        assert torch.cuda.is_available()



# ---------------------------------------------------------------------------------------------
# Pinning: one rule in the block and in a DataLoader's pin thread

def _pinning_answers() -> tuple:
    host = torch.arange(3.0)
    pinned = host.pin_memory()
    return (pinned is host, torch.equal(pinned, host), pinned.is_pinned(), host.is_pinned(),
            pinned.pin_memory().is_pinned())


#: what a GPU answers for (pinned is host, same values, pinned.is_pinned(), host.is_pinned(),
#: pinning a pinned tensor gives a pinned tensor): pin_memory() copies into page-locked memory
PINNING_ON_A_GPU = (False, True, True, False, True)


def test_a_host_tensor_pins_alike_inside_a_block_and_on_a_loader_pin_thread():
    from syncguard.predict.modes import PinningMode

    with predicting() as p:
        in_block = _pinning_answers()
        with pytest.raises(RuntimeError, match="cannot pin 'torch.cuda' tensor"):
            torch.ones(2, device="cuda").pin_memory()
    with PinningMode():  # the pin thread's mode, outside any block
        on_pin_thread = _pinning_answers()
    assert in_block == on_pin_thread == PINNING_ON_A_GPU
    assert p.clean, p.format()
