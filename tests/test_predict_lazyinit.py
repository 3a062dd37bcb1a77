"""Prediction leaves torch's process-wide "CUDA initialised" flag as it found it.

torch's Python implementation of some ops makes tensors with ``device=input.device``; on a
stand-in that would name CUDA, and the C++ binding would call the shimmed
``torch.cuda._lazy_init`` and mark CUDA initialised for the whole process (the flag cannot be
reset from Python). After the block, a CPU build would then answer ``torch.ones(2,
device="cuda")`` with a dispatcher error instead of torch's own. Each case runs in a fresh
interpreter, since the flag is per process; the expected outcome is what a fresh interpreter
that never imported syncguard answers, computed in the same test.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

_AFTER = textwrap.dedent("""
    try:
        torch.ones(2, device="cuda")
        print("OK")
    except BaseException as e:
        print(type(e).__name__, str(e).splitlines()[0] if str(e) else "")
""")

#: ops whose torch Python implementation makes a tensor on ``input.device``
#: (torch/nn/functional.py, torch/_lowrank.py)
CASES = {
    "embedding_bag_2d": """
        w = torch.randn(10, 3, device="cuda")
        i = torch.tensor([[1, 2], [4, 5]], device="cuda")
        out = torch.nn.functional.embedding_bag(i, w)
        assert out.is_cuda
        assert torch.equal(out.cpu(), torch.nn.functional.embedding_bag(i.cpu(), w.cpu()))
    """,
    "fractional_max_pool2d": """
        x = torch.randn(1, 2, 8, 8, device="cuda")
        out = torch.nn.functional.fractional_max_pool2d(x, 2, output_size=4)
        assert out.is_cuda and tuple(out.shape) == (1, 2, 4, 4)
    """,
    "fractional_max_pool3d": """
        x = torch.randn(1, 2, 6, 6, 6, device="cuda")
        out = torch.nn.functional.fractional_max_pool3d(x, 2, output_size=3)
        assert out.is_cuda and tuple(out.shape) == (1, 2, 3, 3, 3)
    """,
    "svd_lowrank": """
        a = torch.randn(6, 4, device="cuda")
        u, s, v = torch.svd_lowrank(a, q=2)
        assert u.is_cuda and s.is_cuda and v.is_cuda
    """,
}


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def bare() -> str:
    """What ``torch.ones(2, device="cuda")`` does in a process that never ran syncguard."""
    return _run("import torch\n" + _AFTER)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA build initialises CUDA itself")
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_cuda_factory_after_prediction_behaves_as_without_syncguard(case, bare):
    block = textwrap.indent(textwrap.dedent(CASES[case]), "    ")
    code = ("import torch\nfrom syncguard.predict import predicting\n"
            "with predicting():\n" + block + _AFTER)
    assert _run(code) == bare
