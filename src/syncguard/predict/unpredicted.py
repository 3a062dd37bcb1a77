"""The ops the stand-ins are known not to run as a GPU would: name -> why, in one table.

The names are those of torch's OpInfo database (``torch.testing._internal.
common_methods_invocations.op_db``): ``"conj"``, ``"nn.functional.conv2d"``, ``"linalg.svd"``. A
name covers the function (``torch.<name>``), the Tensor method and the in-place method
(``<name>_``). ``tests/test_predict_opinfo.py`` runs every OpInfo sample on plain CPU tensors and
on stand-ins inside a block, and fails for an op that disagrees and is not listed here, and for
a listed op that agrees (a stale entry).

Inside a block, a listed op called on stand-ins runs on their CPU data with the predictor's
modes off (the values a GPU computes) and is reported "not predicted (why)": its syncs are not
predicted, and it never gives a wrong value or fails because of syncguard.

:func:`main` prints the table (``.ci/run`` calls it after the OpInfo test).
"""
from __future__ import annotations

import torch

__all__ = ["UNPREDICTED", "lookup", "resolve"]

#: OpInfo name -> why the stand-ins do not run it as a GPU does
UNPREDICTED: dict[str, str] = {
    "unravel_index": ("torch.unravel_index builds its shape tensor with torch.tensor(..., "
                      "device=) inside torch's own Python, where the predictor's function mode "
                      "does not reach and a CPU build refuses the CUDA device"),
}

_NAMESPACES = ("nn.functional.", "linalg.", "special.", "fft.", "sparse.", "signal.windows.")


def resolve(name: str) -> list:
    """The callables a table name covers: ``torch.<name>`` (namespaces included), and for a
    plain name the Tensor method ``<name>`` and in-place ``<name>_``."""
    found = []
    target = torch
    for part in name.split("."):
        target = getattr(target, part, None)
        if target is None:
            break
    if target is not None:
        found.append(target)
    if not name.startswith(_NAMESPACES):
        for method in (name, name + "_"):
            m = getattr(torch.Tensor, method, None)
            if m is not None:
                found.append(m)
    return found


def _by_callable() -> dict:
    out = {}
    for name, why in UNPREDICTED.items():
        for fn in resolve(name):
            try:
                out[fn] = (name, why)
            except TypeError:  # an unhashable callable cannot be looked up: never declared
                pass
    return out


_BY_CALLABLE: dict = _by_callable()


def lookup(func) -> tuple[str, str] | None:
    """(name, why) when ``func`` is a listed op, else None (the function mode asks per call)."""
    try:
        return _BY_CALLABLE.get(func)
    except TypeError:
        return None


def main() -> int:
    print(f"{len(UNPREDICTED)} op(s) declared unpredicted (syncguard.predict.unpredicted):")
    for name in sorted(UNPREDICTED):
        print(f"  {name}: not predicted ({UNPREDICTED[name]})")
    return 0
