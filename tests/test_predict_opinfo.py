"""Stand-ins against plain CPU tensors on torch's own OpInfo samples (issue 45, Build 3).

For every op of ``torch.testing._internal.common_methods_invocations.op_db`` (its function,
method and in-place variants), each sample input runs twice: on plain CPU tensors, and on CUDA
stand-ins inside a ``predicting()`` block, as the predict detector runs a test. The stand-in run
must agree with the CPU run, which computes what a GPU computes (to rounding): the same values
(``assert_close``, NaNs equal), shapes, strides and dtypes; every tensor it returns a stand-in
(on a GPU it is on the device), its shape the same as its data's; the inputs mutated the same way;
the outputs that are an input, or share an input's storage, the same ones.

An op that does not agree must be declared in ``syncguard.predict.unpredicted.UNPREDICTED`` with
a reason; then, under prediction, it must compute the CPU values and be reported "not predicted
(reason)" at every call. A declared op whose bare stand-in run agrees fails as stale.

Kept short for CI: the dtypes float32, complex64, int64 and bool where the op supports them on
the CPU, and the first ``SAMPLES`` samples of each; an op whose two CPU runs under different
seeds differ (random ops, ``empty``) is compared on everything but values.
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import settings
from torch.utils._pytree import tree_flatten, tree_map

from syncguard.predict import CudaStandIn, predicting, unpredicted
from syncguard.predict.tensors import unwrap


def _hypothesis_profile() -> str:
    getter = getattr(settings, "get_current_profile_name", None)  # newer hypothesis
    return getter() if getter else settings._current_profile


# torch's testing module loads a hypothesis profile of its own at import ("pytorch_ci" under
# CI): the suite's (conftest.py) is put back, or every hypothesis test after this module in the
# same process would run with torch's settings
_PROFILE = _hypothesis_profile()
from torch.testing._internal import common_methods_invocations as common  # noqa: E402

settings.load_profile(_PROFILE)

DTYPES = (torch.float32, torch.complex64, torch.int64, torch.bool)
SAMPLES = 4
#: the layouts a stand-in can take: a wrapper tensor of a compressed sparse layout (CSR, CSC,
#: BSR, BSC) cannot be made in torch, so such samples are left out
_LAYOUTS = (torch.strided, torch.sparse_coo)
#: ops whose values torch leaves undefined (uninitialized memory): compared on all but values
_UNINITIALIZED = {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
                  "new_empty_strided"}

BY_NAME: dict[str, list] = {}
for _op in common.op_db:
    BY_NAME.setdefault(_op.name, []).append(_op)


def _variants(op):
    out = [("function", op.op)]
    if op.method_variant is not None:
        out.append(("method", op.method_variant))
    if op.inplace_variant is not None:
        out.append(("inplace", op.inplace_variant))
    return out


def _parts(sample):
    return [sample.input, list(sample.args), dict(sample.kwargs)]


def _clone(parts):
    return tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, parts)


def _call(fn, parts):
    x, args, kwargs = parts
    return fn(x, *args, **kwargs)


def _run_cpu(fn, parts, seed):
    # the CPU generator alone: this run is on plain CPU tensors, and torch.manual_seed also
    # queues a CUDA seeding call, with its stack, each time CUDA is not initialised
    torch.default_generator.manual_seed(seed)
    parts = _clone(parts)
    try:
        return parts, _call(fn, parts), None
    except Exception as e:  # noqa: BLE001 - compared with the stand-in run's
        return parts, None, e


def _tensors(parts):
    return [t for t in tree_flatten(parts)[0] if isinstance(t, torch.Tensor)]


def _same_value(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, torch.dtype | torch.device | torch.Size | int | bool | str | type(None)):
        return a == b
    return True  # other objects (namedtuple fields are flattened) are not compared


def _storage(t):
    try:
        s = t.untyped_storage()
        return s.data_ptr() if s.nbytes() else None
    except (RuntimeError, NotImplementedError):
        return None


def _aliases(outs, inputs):
    """Per output: the input it is (identity), and the inputs whose storage it shares."""
    ptrs = [_storage(unwrap(i)) for i in inputs]
    out = []
    for o in outs:
        if not isinstance(o, torch.Tensor):
            out.append(None)
            continue
        ident = [k for k, i in enumerate(inputs) if o is i]
        p = _storage(unwrap(o))
        shared = [k for k, q in enumerate(ptrs) if p is not None and q == p]
        out.append((ident, shared))
    return out


def _compare(ref, got, values: bool) -> str | None:
    """The first way the stand-in run ``got`` differs from the CPU run ``ref``, or None."""
    (rparts, rout, rerr), (gparts, gout, gerr) = ref, got
    if rerr is not None or gerr is not None:
        if rerr is None:
            return f"raised {type(gerr).__name__}: {str(gerr).splitlines()[0][:160]}"
        if gerr is None:
            return f"did not raise {type(rerr).__name__} as the CPU run did"
        return None if isinstance(gerr, type(rerr)) or isinstance(rerr, type(gerr)) else (
            f"raised {type(gerr).__name__} where the CPU run raised {type(rerr).__name__}")
    rflat, rspec = tree_flatten(rout)
    gflat, gspec = tree_flatten(gout)
    if len(rflat) != len(gflat):
        return f"returned {len(gflat)} leaves, the CPU run {len(rflat)}"
    # outputs are on the device (as a GPU's); an input stays where the sample put it
    pairs = [(r, g, "output", True) for r, g in zip(rflat, gflat)]
    pairs += [(r, g, "input after the call", isinstance(g, CudaStandIn))
              for r, g in zip(_tensors(rparts), _tensors(gparts))]
    for r, g, what, on_device in pairs:
        if isinstance(r, torch.Tensor) != isinstance(g, torch.Tensor):
            return f"{what}: {type(g).__name__} where the CPU run gave {type(r).__name__}"
        if not isinstance(r, torch.Tensor):
            if not _same_value(r, g):
                return f"{what}: {g!r} where the CPU run gave {r!r}"
            continue
        if on_device and not isinstance(g, CudaStandIn):
            return f"{what}: a host tensor where a GPU gives a CUDA tensor"
        data = unwrap(g)
        if (g.shape, g.stride(), g.dtype, g.is_conj(), g.is_neg()) != (
                data.shape, data.stride(), data.dtype, data.is_conj(), data.is_neg()):
            return (f"{what}: the stand-in says {tuple(g.shape)} {g.dtype} strides {g.stride()}, "
                    f"its data {tuple(data.shape)} {data.dtype} strides {data.stride()}")
        if (r.shape, r.dtype, r.layout) != (data.shape, data.dtype, data.layout):
            return (f"{what}: {tuple(data.shape)} {data.dtype} where the CPU run gave "
                    f"{tuple(r.shape)} {r.dtype}")
        if r.layout == torch.strided and r.stride() != data.stride():
            return f"{what}: strides {data.stride()} where the CPU run gave {r.stride()}"
        if values and r.layout == torch.strided:
            try:
                torch.testing.assert_close(data.resolve_conj().resolve_neg(),
                                           r.resolve_conj().resolve_neg(), equal_nan=True)
            except AssertionError as e:
                return f"{what}: values differ ({str(e).splitlines()[0]})"
    rin, gin = _tensors(rparts), _tensors(gparts)
    if _aliases(rflat, rin) != _aliases(gflat, gin):
        return (f"aliasing differs: outputs are/share inputs {_aliases(gflat, gin)}, "
                f"on the CPU {_aliases(rflat, rin)}")
    return None


def _host(x):
    """A stand-in sample's CPU twin: the data copied, a CUDA device argument named ``cpu``."""
    if isinstance(x, torch.Tensor):
        return unwrap(x).clone()
    if isinstance(x, torch.device) and x.type == "cuda":
        return torch.device("cpu")
    if isinstance(x, str) and x.split(":")[0] == "cuda":
        return "cpu"
    return x


def run_op(name: str):
    """Every sample of every entry and variant of ``name``: (disagreements, calls on stand-ins,
    the block's "not predicted" list). The samples are OpInfo's for ``"cuda"``, made inside a
    block, so what OpInfo puts on the device is a stand-in and what it keeps on the host (split
    indices, ``q`` of quantile...) stays there; the CPU run gets their CPU twins."""
    problems, calls, cases = [], 0, []
    with predicting():
        for op in BY_NAME[name]:
            for dtype in [d for d in DTYPES if d in op.supported_dtypes("cpu")]:
                # the same draws whichever tests ran before in this process (xdist's order)
                torch.manual_seed(0)
                try:
                    # only the samples used are made (OpInfo makes them one by one)
                    samples = list(itertools.islice(
                        op.sample_inputs("cuda", dtype, requires_grad=False), SAMPLES))
                except Exception:  # noqa: BLE001 - an OpInfo that cannot make samples here
                    continue
                for i, sample in enumerate(samples):
                    parts = _parts(sample)
                    if any(t.layout not in _LAYOUTS for t in _tensors(parts)):
                        continue  # see _LAYOUTS
                    host = tree_map(_host, parts)
                    label = op.name + (f".{op.variant_test_name}" if op.variant_test_name
                                       else "")
                    for kind, fn in _variants(op):
                        cases.append((f"{label} {kind} {dtype} sample {i}", fn, parts, host))
    refs = []
    for label, fn, parts, host in cases:
        first, second = _run_cpu(fn, host, 0), _run_cpu(fn, host, 1)
        refs.append((first, name not in _UNINITIALIZED and _compare_cpu(first, second)))
    runs = []
    with predicting() as p:
        for (label, fn, parts, host), (ref, same) in zip(cases, refs):
            standin_parts = _clone(parts)
            try:
                got = (standin_parts, _call(fn, standin_parts), None)
            except Exception as e:  # noqa: BLE001 - compared with the CPU run's
                got = (standin_parts, None, e)
            calls += 1
            runs.append((label, ref, got, same))
    # compared once the block is closed: the comparison's own torch calls (assert_close on the
    # stand-ins' CPU data) are not under test, and run through prediction they cost most of it
    for label, ref, got, same in runs:
        problem = _compare(ref, got, same)
        if problem is not None:
            problems.append(f"{label}: {problem}")
    return problems, calls, list(p.unmodelled)


def _compare_cpu(a, b) -> bool:
    """Whether two CPU runs under different seeds computed the same values (else only
    everything but values is compared)."""
    if (a[2] is None) != (b[2] is None):
        return False
    for x, y in zip(tree_flatten(a[1])[0] + _tensors(a[0]), tree_flatten(b[1])[0] + _tensors(b[0])):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.layout != torch.strided or x.shape != y.shape:
                continue
            try:
                torch.testing.assert_close(x.resolve_conj().resolve_neg(),
                                           y.resolve_conj().resolve_neg(), equal_nan=True)
            except AssertionError:
                return False
    return True


NAMES = sorted(BY_NAME)


@pytest.mark.parametrize("name", NAMES)
def test_op_on_standins_agrees_with_the_cpu_or_is_declared(name, monkeypatch):
    with monkeypatch.context() as bare:
        bare.setattr(unpredicted, "_BY_CALLABLE", {})
        problems, calls, _ = run_op(name)
    why = unpredicted.UNPREDICTED.get(name)
    if why is None:
        assert not problems, (f"{name} disagrees on stand-ins ({len(problems)} of {calls} "
                              f"calls); fix it, or declare it in syncguard/predict/"
                              f"unpredicted.py:\n  " + "\n  ".join(problems[:8]))
        return
    assert problems, (f"{name} is declared unpredicted ({why}) but agrees on all {calls} "
                      f"calls: remove the stale entry")
    problems, calls, unmodelled = run_op(name)
    assert not problems, (f"{name} is declared, but under prediction still disagrees:\n  "
                          + "\n  ".join(problems[:8]))
    reported = [u for u in unmodelled if u.what == name and u.why == why]
    assert len(reported) == calls, (f"{name}: {len(reported)} of {calls} calls were reported "
                                    f"\"not predicted ({why})\"")


def test_every_declared_name_is_an_opinfo_op_and_names_a_callable():
    for name, why in unpredicted.UNPREDICTED.items():
        assert name in BY_NAME, f"{name} is no OpInfo op"
        assert why and unpredicted.resolve(name), name
