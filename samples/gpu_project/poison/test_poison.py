"""A device-side assert poisons the process's CUDA context; syncguard must blame only its culprit.

Run separately (see the commands in the syncguard report): serially the later tests are errors
naming the culprit; with --syncguard-isolate or -n 2 they pass.
"""
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("i", range(2))
def test_a_before(i):
    torch.ones(8, device="cuda").add_(i)


def test_b_culprit():
    x = torch.zeros(4, device="cuda")
    bad = torch.tensor([7], device="cuda")
    x[bad] = 1.0  # out of bounds: a device-side assert, reported at the next sync
    torch.cuda.synchronize()


@pytest.mark.parametrize("i", range(3))
def test_c_after(i):
    torch.ones(8, device="cuda").add_(i)
