"""Stand-ins behave like the CUDA tensors they stand for (issue 45, what kornia's suite showed).

Each expected value is torch's own answer on plain CPU tensors (the values a GPU computes, to
rounding), or what torch documents for a CUDA tensor (device, in-place identity); never the
predictor's. Every test here failed before its fix.
"""
from __future__ import annotations

import pytest
import torch

from syncguard.predict import CudaStandIn, predicting
from syncguard.predict.tensors import unwrap


def test_type_as_a_cuda_tensor_stays_on_the_device_with_its_dtype():
    """kornia's blur_pool: ``bool_standin.type_as(float_standin)`` came back as a CPU tensor,
    and the next op raised "Expected all tensors to be on the same device"."""
    with predicting() as p:
        mask = torch.tensor([True, False, True], device="cuda")
        weights = torch.ones(3, device="cuda")
        before = len(p.syncs)
        out = mask.type_as(weights)
        assert isinstance(out, CudaStandIn) and out.dtype == torch.float32
        total = out * weights  # raised before the fix
        back = weights.type_as(torch.ones(1, dtype=torch.float64))  # to the host, as on a GPU
    assert unwrap(total).tolist() == [1.0, 0.0, 1.0]
    assert type(back) is torch.Tensor and back.dtype == torch.float64
    # the one copy is the move to the host; the type_as on the device copies nothing
    assert [e.kind for e in p.syncs[before:]] == ["blocking_copy_d2h"], p.format()


def test_conj_keeps_the_conjugation():
    """kornia's fftconv: ``z * conj(z)`` gave ``z * z``."""
    z = torch.tensor([1 + 2j, 3 - 1j])
    with predicting():
        zc = torch.conj(z.cuda())
        assert zc.is_conj()
        product = unwrap(z.cuda() * zc)
        resolved = unwrap(zc.resolve_conj())
        neg = unwrap(torch.ones(2, dtype=torch.complex64, device="cuda")._neg_view() + 0)
    torch.testing.assert_close(product, z * z.conj())
    torch.testing.assert_close(resolved, z.conj().resolve_conj())
    assert neg.tolist() == [-1, -1]


@pytest.mark.parametrize("call, shape", [
    (lambda t: t.unsqueeze_(0), (1, 2, 3)),
    (lambda t: t.squeeze_(), (2, 3)),
    (lambda t: t.t_(), (3, 2)),
    (lambda t: t.transpose_(0, 1), (3, 2)),
    (lambda t: t.swapdims_(0, 1), (3, 2)),
    (lambda t: t.resize_(4, 5), (4, 5)),
    (lambda t: t.as_strided_((3,), (2,)), (3,)),
    (lambda t: torch.add(t.new_ones(1, 3), 1, out=t), (1, 3)),
])
def test_in_place_shape_ops_change_the_standins_shape(call, shape):
    """kornia's apply_colormap: ``x.unsqueeze_(0)`` left the stand-in 3-d."""
    base = torch.arange(6.0).reshape(2, 3)
    if shape == (2, 3):
        base = base.reshape(1, 2, 3)
    expected = call(base.clone())
    with predicting():
        x = base.clone().cuda()
        out = call(x)
        assert out is x and x.shape == shape == expected.shape
        assert x.stride() == expected.stride()
        got = unwrap(x + 0)
    assert got.shape == shape


def test_a_host_device_named_beside_a_standin_makes_a_host_tensor():
    with predicting():
        x = torch.ones(2, device="cuda")
        made = [x.new_zeros(3, device="cpu"), x.new_empty(3, device="cpu"),
                torch.zeros_like(x, device="cpu"), torch.ones_like(x, device="cpu")]
        same = [x.new_zeros(3), torch.zeros_like(x), x.new_full((2,), 1.0)]
    assert all(type(t) is torch.Tensor and t.device.type == "cpu" for t in made)
    assert all(isinstance(t, CudaStandIn) for t in same)


def test_a_nested_block_is_a_no_op_that_still_collects():
    """kornia's gaussian_blur2d and box_blur raised under a block nested in the session's."""
    import torch.nn.functional as F

    with predicting() as outer:
        x = torch.rand(1, 3, 8, 8, device="cuda")
        with predicting() as inner:
            # kornia's filter2d: kernel.to(device=input.device) stayed on the host
            kernel = torch.tensor([[0.25, 0.5, 0.25]]).to(device=x.device).expand(3, 1, 3)
            y = F.conv1d(x.flatten(2), kernel, groups=3)
        reference = F.conv1d(unwrap(x).flatten(2), unwrap(kernel), groups=3)
    assert isinstance(y, CudaStandIn)
    torch.testing.assert_close(unwrap(y), reference)
    assert [e.kind for e in inner.syncs] == ["blocking_copy_h2d"], inner.format()
    assert not outer.syncs, outer.format()


def _reads_the_device(x):
    if x.device.type == "cpu":
        return x * 2
    return x + 1


def _ignores_the_device(x):
    return x + 1


def _converts_to_the_inputs_device(x, top: torch.Tensor = torch.tensor(3.0)):
    return top.to(x) - x


def test_torchscript_that_reads_the_device_is_not_predicted_and_computes_as_a_gpu():
    """kornia's color conversions branch on ``image.device.type``; scripted, they took the CPU
    branch (and failed) on stand-ins."""
    with predicting() as p:
        x = torch.ones(3, device="cuda")
        scripted = torch.jit.script(_reads_the_device)
        out = scripted(x)
        assert "device" in str(scripted.graph)  # still the scripted function's attributes
        plain = torch.jit.script(_ignores_the_device)(x)
        traced = torch.jit.trace(_ignores_the_device, (x,))(x)
    assert unwrap(out).tolist() == [2.0] * 3  # what the GPU computes: x + 1
    assert unwrap(plain).tolist() == unwrap(traced).tolist() == [2.0] * 3
    whys = [u.why for u in p.unmodelled]
    assert len(whys) == 2 and all(w.startswith("TorchScript") for w in whys), p.format()
    assert scripted(torch.ones(3)).tolist() == [2.0] * 3  # a host tensor runs it scripted


@pytest.mark.parametrize("move", [
    lambda x, dev: x.to(dev), lambda x, dev: x.cuda(), lambda x, dev: x.to(torch.float64),
    lambda x, dev: x.type_as(torch.ones(1, dtype=torch.float64, device="cuda")),
    lambda x, dev: x.cuda().cpu(),
])
def test_moves_and_conversions_keep_the_autograd_graph(move):
    """kornia's shift_rgb gradcheck: ``.to(image)`` of a leaf made a stand-in with no grad_fn,
    and the gradient to the host tensor was lost."""
    with predicting():
        x = torch.tensor([0.5, 2.0], requires_grad=True)
        y = move(x, torch.device("cuda"))
        assert y.grad_fn is not None
        (grad,) = torch.autograd.grad((y * 3).sum(), x)
    assert type(grad) is torch.Tensor and grad.dtype == torch.float32
    assert grad.tolist() == [3.0, 3.0]  # d(3 * sum(x))/dx, as torch computes on the host


def test_gradcheck_of_a_function_that_moves_a_host_tensor_to_the_device():
    def shift(image, r):
        return (image + r.view(-1, 1).to(image)).clamp(min=0, max=1)

    with predicting():
        image = torch.rand(2, 3, device="cuda", dtype=torch.float64, requires_grad=True)
        r = torch.tensor([0.1], dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(shift, (image, r), fast_mode=True)


def test_a_declared_unpredicted_op_computes_on_the_host_data_and_is_reported(monkeypatch):
    """The plumbing of ``unpredicted.py``'s table, with a stand-in entry (the real table's
    entries are checked by tests/test_predict_opinfo.py): the op runs on the stand-ins' CPU
    data, its outputs are stand-ins, an in-place one returns its input with the new shape."""
    from syncguard.predict import unpredicted

    table = {fn: ("conj", "a reason") for fn in unpredicted.resolve("conj")}
    table.update({fn: ("unsqueeze", "another") for fn in unpredicted.resolve("unsqueeze")})
    monkeypatch.setattr(unpredicted, "_BY_CALLABLE", table)
    z = torch.tensor([1 + 2j, 3 - 1j])
    with predicting() as p:
        x = z.cuda()
        c = torch.conj(x)
        y = x.unsqueeze_(0)
        assert isinstance(c, CudaStandIn) and c.is_conj() and y is x and x.shape == (1, 2)
        product = unwrap(x[0] * c)
    torch.testing.assert_close(product, z * z.conj())
    assert [(u.what, u.why) for u in p.unmodelled] == [("conj", "a reason"),
                                                       ("unsqueeze", "another")]


def test_torchscript_that_converts_to_another_tensors_device_runs_as_on_a_gpu():
    """kornia's invert: ``max_val.to(image)`` scripted took the stand-in's C++ device."""
    with predicting() as p:
        x = torch.ones(3, device="cuda")
        out = torch.jit.script(_converts_to_the_inputs_device)(x)
    assert isinstance(out, CudaStandIn) and unwrap(out).tolist() == [2.0] * 3
    assert [u.why.startswith("TorchScript") for u in p.unmodelled] == [True], p.format()
