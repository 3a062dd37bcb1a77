"""TorchScript on stand-ins: ``torch.jit.script`` and ``torch.jit.trace`` inside a block.

Why: the TorchScript interpreter reads a tensor's device from C++ (``prim::device``,
``prim::is_cuda``, ``aten::get_device``), where a stand-in's is the CPU, so scripted code that
branches on the device takes the CPU branch a GPU never takes; and the tracer cannot record
through a tensor subclass at all. Such calls run the user's Python eagerly instead, with the
same values a GPU computes, and are reported "not predicted (TorchScript ...)". Scripted code
that never reads the device runs scripted: its ops reach the predictor's dispatch mode and are
predicted as any other.
"""
from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from syncguard.predict.predictor import cannot
from syncguard.predict.tensors import is_standin
from syncguard.predict.threads import _inside

__all__ = ["scripting", "tracing", "SCRIPT_WHY", "TRACE_WHY"]

SCRIPT_WHY = ("TorchScript: the scripted code reads a tensor's device, which the interpreter "
              "takes from C++ (the CPU for a stand-in); it ran as eager Python instead, so what "
              "the scripted code does on a GPU is not predicted")
TRACE_WHY = ("TorchScript: torch.jit.trace cannot trace a CUDA stand-in; the traced function "
             "runs as eager Python instead, so what the traced graph does on a GPU is not "
             "predicted")

#: TorchScript nodes that read a tensor's device
_DEVICE_READS = frozenset({"prim::device", "prim::is_cuda", "prim::is_cpu", "aten::get_device",
                           "prim::is_xpu", "prim::is_mps", "prim::is_meta"})


def _kinds(block) -> set[str]:
    """The node kinds of a graph, a conversion to another tensor's device and dtype
    (``x.to(other)``, ``x.type_as(other)``, which take the other's C++ device) named
    ``prim::device`` as the read it is."""
    out = set()
    for node in block.nodes():
        kind = node.kind()
        out.add(kind)
        if kind in ("aten::to", "aten::type_as") and len(list(node.inputs())) > 1 and (
                list(node.inputs())[1].type().kind() == "TensorType"):
            out.add("prim::device")
        for inner in node.blocks():
            out |= _kinds(inner)
    return out


def _has_standin(args, kwargs) -> bool:
    return any(is_standin(x) for x in tree_flatten((args, kwargs))[0])


class ScriptedFunction:
    """A scripted function whose code reads the device: called with stand-ins inside a block,
    the Python function runs (reported); otherwise the scripted one. Everything else (``graph``,
    ``code``, ``save``) is the scripted function's."""

    def __init__(self, scripted: Any, python: Any) -> None:
        self._sg_scripted, self._sg_python = scripted, python
        functools.update_wrapper(self, python)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _inside() and _has_standin(args, kwargs):
            cannot("torch.jit.script", SCRIPT_WHY)
            return self._sg_python(*args, **kwargs)
        return self._sg_scripted(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sg_scripted, name)


def scripting(script):
    """``torch.jit.script``: compiled by torch as always (its errors are a GPU's); a scripted
    *function* that reads the device is wrapped (``ScriptedFunction``). Modules, callees the
    compiler scripts on its own, and threads not inside a block get torch's own result."""

    @functools.wraps(script)
    def wrapper(obj, *args: Any, **kwargs: Any) -> Any:
        out = script(obj, *args, **kwargs)
        if (not _inside() or "_rcb" in kwargs  # TorchScript compiling a callee: its own
                or not isinstance(out, torch.jit.ScriptFunction)
                or not callable(obj) or isinstance(obj, torch.jit.ScriptFunction)):
            return out
        try:
            kinds = _kinds(out.inlined_graph)
        except RuntimeError:
            return out
        return ScriptedFunction(out, obj) if kinds & _DEVICE_READS else out

    return wrapper


def tracing(trace):
    """``torch.jit.trace`` with a stand-in among the example inputs, inside a block: the
    function (or module) itself, reported, since the tracer cannot record through a stand-in."""

    @functools.wraps(trace)
    def wrapper(func, example_inputs=None, *args: Any, **kwargs: Any) -> Any:
        examples = example_inputs if example_inputs is not None else kwargs.get(
            "example_kwarg_inputs")
        if _inside() and _has_standin((examples,), {}):
            cannot("torch.jit.trace", TRACE_WHY)
            return func
        return trace(func, example_inputs, *args, **kwargs)

    return wrapper
