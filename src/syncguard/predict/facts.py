"""Facts about one op call that decide whether it waits: what the rules table is keyed by.

Only properties a GPU run showed to matter are extracted (see rules.MODELLED_FACTS); anything
else about the call is deliberately not part of the key, so one measured snippet covers every
call that agrees on these facts.
"""
from __future__ import annotations

from typing import Any

import torch

from syncguard.predict.copies import copy_facts
from syncguard.predict.tensors import is_standin

__all__ = ["op_facts", "is_device_kernel", "mixes_host_tensors"]

_INDEX_OPS = {"index", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index",
              "_unsafe_index_put"}
_DYNAMIC_TAGS = (torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output)


def _side(t: torch.Tensor) -> str:
    return "cuda" if is_standin(t) else "cpu"


def op_facts(func, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The facts of an aten op call that involves at least one CUDA stand-in."""
    base = func._schema.name.split("::", 1)[-1]
    facts: dict[str, Any] = {}
    if base in _INDEX_OPS:
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        for idx in indices or ():
            if isinstance(idx, torch.Tensor):
                key = "mask" if idx.dtype in (torch.bool, torch.uint8) else "index"
                facts[key] = _side(idx)
        if base != "index":
            acc = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
            facts["accumulate"] = bool(acc)
            # a one-element host value through a mask is a masked_fill_ on a GPU (aten's
            # canDispatchToMaskedFill): no nonzero, no wait
            values = args[2] if len(args) > 2 else kwargs.get("values")
            if (facts.get("mask") == "cuda" and isinstance(values, torch.Tensor)
                    and not is_standin(values) and values.numel() == 1):
                facts["values"] = "host_scalar"
        if torch.are_deterministic_algorithms_enabled():  # another kernel, measured apart
            facts["deterministic"] = True
    elif base == "histc":  # min == max (0 and 0 by default): the range is read from the data
        lo = args[2] if len(args) > 2 else kwargs.get("min", 0)
        hi = args[3] if len(args) > 3 else kwargs.get("max", 0)
        facts["range"] = "absent" if lo == hi else "given"
    elif base == "mode":  # the kernel depends on the slice length: only measured ones count
        dim = args[1] if len(args) > 1 else kwargs.get("dim", -1)
        facts["slice_size"] = int(args[0].shape[dim]) if args[0].dim() else 1
    elif base == "repeat_interleave":
        facts["output_size"] = "absent" if kwargs.get("output_size") is None else "given"
    elif base == "copy_":
        dst, src = args[0], args[1]
        nb = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
        dst_c, src_c = is_standin(dst), is_standin(src)
        host = dst if src_c and not dst_c else src if dst_c and not src_c else None
        facts.update(copy_facts(src_c, dst_c, host, nb))
    if any(t.layout != torch.strided for t in _tensors(args, kwargs)):
        facts["sparse"] = True  # sparse kernels are others than the dense op of the same name
    return facts


def _tensors(args: tuple, kwargs: dict):
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (x for x in a if isinstance(x, torch.Tensor))


def mixes_host_tensors(args: tuple, kwargs: dict) -> bool:
    """A CUDA stand-in next to a non-scalar CPU tensor: on a GPU most kernels refuse this."""
    return any(not is_standin(t) and t.dim() > 0 for t in _tensors(args, kwargs))


def is_device_kernel(func, args: tuple, kwargs: dict) -> bool:
    """Every tensor on the device (0-dim CPU scalars allowed, as CUDA kernels allow them), an
    output shape known without reading device memory, and not a copy to or from the host."""
    if any(tag in _DYNAMIC_TAGS for tag in func.tags):
        return False
    if func._schema.name == "aten::copy_":  # only a copy between two device tensors
        return is_standin(args[0]) and is_standin(args[1])
    if func._schema.name in ("aten::_to_copy", "aten::_local_scalar_dense"):
        return False
    if "mask" in op_facts(func, args, kwargs):  # boolean masks are counted on the host
        return False
    return not mixes_host_tensors(args, kwargs)
