"""The function mode and the dispatch mode of the predictor: two torch modes that let CUDA code
run on the CPU and ask the rules table, for every op that touches a CUDA stand-in, whether a GPU
would have made the host wait.
for every op that touches a CUDA stand-in, whether a GPU would have made the host wait.

Why two modes:

* a ``TorchFunctionMode`` sees calls as the user wrote them, before the Python bindings check
  devices. It rewrites ``device="cuda"`` / ``pin_memory=True`` to what a CPU build accepts, and
  implements the host<->device moves (``.to``, ``.cuda``, ``.cpu``, ``.tolist``,
  ``pin_memory``): on a stand-in whose C++ device is the CPU, C++ would treat ``.cpu()`` as a
  no-op and never dispatch it;
* a ``TorchDispatchMode`` sees every aten op (also those torch's own Python code issues while
  the function mode is paused), unwraps stand-ins, runs the CPU kernel and wraps outputs again.
  Rules are keyed by these aten ops, the names the profile detector records on the GPU.
"""
from __future__ import annotations

from contextlib import nullcontext

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from syncguard.predict.copies import copy_facts, is_marked_pinned, mark_pinned
from syncguard.predict.devices import _first_index, check_ordinal, cuda_index
from syncguard.predict.facts import is_device_kernel, op_facts
from syncguard.predict.predictor import Predictor, active
from syncguard.predict.rng import seeded_draw
from syncguard.predict.rules import op_name
from syncguard.predict.tensors import _rewrap, is_standin, torch_reads_host, unwrap, wrap
from syncguard.predict.unpredicted import lookup as unpredicted

__all__ = ["PredictFunctionMode", "PredictDispatchMode", "PinningMode"]

_TO_COPY = "aten::_to_copy"
_DATA_CONSTRUCTORS = {"tensor", "as_tensor", "asarray"}
#: aten op -> indices of its outputs that stay on the host even for CUDA inputs (torch's
#: PackedSequence requires batch_sizes on the CPU)
_HOST_OUTPUTS = {"aten::_pack_padded_sequence": (1,)}
_NUMPY_ERROR = ("can't convert cuda:{} device type tensor to numpy. Use Tensor.cpu() to copy "
                "the tensor to host memory first.")


def _tensor_method(func) -> str | None:
    name = getattr(func, "__name__", None)
    return name if name is not None and getattr(torch.Tensor, name, None) is func else None


def _has_tensor(args, kwargs) -> bool:
    return any(isinstance(x, torch.Tensor) for a in list(args) + list(kwargs.values())
               for x in (a if isinstance(a, (list, tuple)) else (a,)))


_PINNING = ("pin_memory", "is_pinned")


def _pinning(method: str, tensor: torch.Tensor):
    """``tensor.pin_memory()`` or ``tensor.is_pinned()`` for a host tensor, the one rule of a
    block's function mode and of a DataLoader's pin thread: a CPU build cannot pin, so pinning
    is a copy remembered as pinned (a later ``non_blocking`` upload of it is then predicted as
    from pinned memory), and ``is_pinned()`` reads that mark (the function mode reads a
    stand-in's the same way; pinning one raises there, as on a GPU)."""
    if method == "pin_memory":
        return mark_pinned(tensor.clone())
    return is_marked_pinned(tensor)


def _first_standin_index(args, kwargs) -> int | None:
    for a in list(args) + list(kwargs.values()):
        for x in (a if isinstance(a, (list, tuple)) else (a,)):
            if is_standin(x):
                return x._sg_index
    return None


class _Collecting:
    """Both modes report to the innermost collector on this thread: a ``predicted()`` region
    inside the block, else the block's own predictor."""

    def __init__(self, predictor: Predictor):
        super().__init__()
        self._own = predictor

    @property
    def p(self) -> Predictor:
        return active() or self._own


class PredictFunctionMode(_Collecting, TorchFunctionMode):
    """Device arguments and host<->device moves, as the user wrote them."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        method = _tensor_method(func)
        if method in ("to", "cuda", "cpu"):
            return self._move(method, args, kwargs)
        if method == "tolist" and is_standin(args[0]):
            self._copy_event(True, False, None, False)
            return unwrap(args[0]).tolist()
        if method in ("numpy", "__array__") and is_standin(args[0]):
            raise TypeError(_NUMPY_ERROR.format(args[0]._sg_index))
        if method in _PINNING:
            if method == "pin_memory" and is_standin(args[0]):
                raise RuntimeError("cannot pin 'torch.cuda' tensor: only dense CPU tensors can "
                                   "be pinned")
            return _pinning(method, args[0])
        if method == "record_stream":
            return None
        if method == "new_tensor" and is_standin(args[0]):
            return self._new_tensor(func, args, kwargs)
        if method == "type" and is_standin(args[0]):
            return self._type(args, kwargs)
        declared = unpredicted(func)
        if declared is not None and _first_standin_index(args, kwargs) is not None:
            return self._unpredicted(func, args, kwargs, *declared)
        if method == "type_as" and (is_standin(args[0]) or is_standin(args[1])):
            # C++ converts to the other's options, whose device is a stand-in's real one, the
            # CPU; on a GPU the result is on the other's device, with its dtype
            return self._move("to", args[:2], {})
        index = check_ordinal(cuda_index(kwargs.get("device")))
        host = kwargs.get("device") is not None and index is None
        pinned = kwargs.get("pin_memory") is True
        if index is not None:
            kwargs["device"] = "cpu"
        if pinned:
            kwargs["pin_memory"] = False
        if (index is not None and getattr(func, "__name__", "") in _DATA_CONSTRUCTORS
                and args and not is_standin(args[0])):
            # data from Python or a host tensor goes to the device by a blocking copy
            host = args[0] if isinstance(args[0], torch.Tensor) else None
            self._copy_event(False, True, host, False)
        inner = _first_standin_index(args, kwargs)
        if inner is not None:
            self._own.forwarding.append(inner)
        try:
            # a random factory for "cuda" draws from the stand-ins' generator (rng.py)
            with seeded_draw(func, kwargs) if index is not None else nullcontext(), \
                    torch_reads_host() if inner is not None else nullcontext():
                out = func(*args, **kwargs)
        finally:
            if inner is not None:
                self._own.forwarding.pop()
        if index is not None:
            out = tree_map(lambda o: wrap(o, index) if isinstance(o, torch.Tensor) else o, out)
        elif host and inner is not None:
            # a host device named beside stand-ins (new_zeros(..., device="cpu"),
            # zeros_like(x, device="cpu")): the dispatch mode labels what a call on stand-ins
            # makes, but this was asked for on the host
            out = tree_map(unwrap, out)
        if pinned:
            tree_map(lambda o: mark_pinned(o) if isinstance(o, torch.Tensor) else o, out)
        return out

    def _unpredicted(self, func, args, kwargs, name: str, why: str):
        """An op of the table in ``unpredicted.py``: run on the stand-ins' CPU data with the
        modes off (the values a GPU computes), outputs labelled again, reported."""
        from torch.utils._python_dispatch import _disable_current_modes

        self.p.cannot(name, why)
        with _disable_current_modes():
            out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
        return _rewrap(out, args, kwargs, True, _first_standin_index(args, kwargs))

    def _new_tensor(self, func, args, kwargs):
        """``standin.new_tensor(data)``: on a GPU a tensor on the stand-in's device (C++ would
        make it on the stand-in's real device, the CPU), filled by a blocking copy from the
        host (from the device for data that is itself a CUDA tensor)."""
        src, rest = args[0], list(args[1:])
        data = rest.pop(0) if rest else kwargs.pop("data")
        device = kwargs.pop("device", None)
        index = src._sg_index if device is None else check_ordinal(cuda_index(device))
        if index is None:  # an explicit host device: torch's own answer
            return func(src, data, *rest, device=device, **kwargs)
        out = unwrap(src).new_tensor(unwrap(data), *rest, **kwargs)
        if is_standin(data):
            self._copy_event(True, True, None, False)
        else:
            self._copy_event(False, True, data if isinstance(data, torch.Tensor) else None,
                             False)
        return wrap(out, index)

    def _type(self, args, kwargs):
        """``standin.type()``: the CUDA type's name (``torch.cuda.FloatTensor``); with a type,
        a conversion that stays on the device for a dtype or a CUDA type and moves to the host
        for a CPU type, as on a GPU."""
        src, rest = args[0], list(args[1:])
        kind = rest.pop(0) if rest else kwargs.pop("dtype", None)
        non_blocking = bool(rest.pop(0) if rest else kwargs.pop("non_blocking", False))
        if kind is None:
            name = unwrap(src).type()  # e.g. torch.FloatTensor, torch.sparse.FloatTensor
            return "torch.cuda." + name[len("torch."):]
        if isinstance(kind, str):  # "torch.cuda.DoubleTensor": the type of that name
            resolved = torch if kind.startswith("torch.") else None
            for part in kind.split(".")[1:] if resolved is not None else ():
                resolved = getattr(resolved, part, None)
            if not (hasattr(resolved, "is_cuda") and hasattr(resolved, "dtype")):
                raise ValueError(f"invalid type: '{kind}'")
            kind = resolved
        if isinstance(kind, torch.dtype):
            dtype, to_cuda = kind, True
        else:  # a tensor type (torch.cuda.DoubleTensor, torch.FloatTensor, ...)
            dtype, to_cuda = kind.dtype, bool(kind.is_cuda)
        if to_cuda and dtype == src.dtype:
            return src
        device = torch.device("cuda", src._sg_index) if to_cuda else torch.device("cpu")
        return self._move("to", (src, device, dtype), {"non_blocking": non_blocking})

    def _copy_event(self, src_cuda: bool, dst_cuda: bool, host, non_blocking: bool) -> None:
        self.p.decide(_TO_COPY, copy_facts(src_cuda, dst_cuda, host, non_blocking))

    def _move(self, method: str, args, kwargs):
        src, rest = args[0], args[1:]
        src_cuda = is_standin(src)
        if method == "cpu":
            index, dtype, non_blocking, fmt, copy = None, None, False, None, False
            dst_cuda = False
        elif method == "cuda":
            dev = kwargs.pop("device", rest[0] if rest else None)
            index = cuda_index("cuda" if dev is None else dev)
            if index is None:
                index = int(dev) if isinstance(dev, int) else 0
            check_ordinal(index)
            dtype, non_blocking = None, bool(kwargs.get("non_blocking", False))
            fmt, copy, dst_cuda = kwargs.get("memory_format"), False, True
        else:
            copy = bool(kwargs.pop("copy", False))
            # copy given by position: to(other, non_blocking, copy), to(dtype, non_blocking,
            # copy), to(device, dtype, non_blocking, copy); torch's parser takes none of them
            at = 3 if rest and not isinstance(rest[0], (torch.Tensor, torch.dtype)) else 2
            if len(rest) > at:
                copy, rest = bool(rest[at]), tuple(rest[:at]) + tuple(rest[at + 1:])
            if rest and isinstance(rest[0], torch.Tensor):
                other = rest[0]
                dev, dtype = other.device, other.dtype
                non_blocking = bool(rest[1] if len(rest) > 1 else kwargs.get("non_blocking", False))
                fmt = kwargs.get("memory_format")
            else:
                # an int device is a CUDA index on a GPU (a CPU build's parser has no
                # accelerator to give it to)
                if rest and isinstance(rest[0], int) and not isinstance(rest[0], bool):
                    rest = (torch.device("cuda", rest[0]),) + tuple(rest[1:])
                if isinstance(kwargs.get("device"), int) and not isinstance(
                        kwargs["device"], bool):
                    kwargs["device"] = torch.device("cuda", kwargs["device"])
                dev, dtype, non_blocking, fmt = torch._C._nn._parse_to(*rest, **kwargs)
            index = check_ordinal(cuda_index(dev))
            dst_cuda = src_cuda if dev is None else index is not None
        elem = unwrap(src)
        fmt = fmt or torch.preserve_format
        if dst_cuda == src_cuda:
            out = elem.to(dtype=dtype, copy=copy, memory_format=fmt)
            if out is elem:
                return src
            if not dst_cuda:  # host to host: torch's own
                return out
            index = src._sg_index
        else:
            self._copy_event(src_cuda, dst_cuda, elem if not src_cuda else None, non_blocking)
            out = elem.to(dtype=dtype, copy=True, memory_format=fmt)
        if torch.is_grad_enabled() and src.requires_grad:
            return _Move.apply(src, dst_cuda, index or 0, dtype, fmt)
        return wrap(out, index or 0) if dst_cuda else out


class _Move(torch.autograd.Function):
    """A move or conversion with a stand-in on either side, differentiable as torch's ``to``
    is on a GPU (a stand-in's data is detached, so the copy alone would cut the graph): the
    gradient goes back to the source's device and dtype."""

    @staticmethod
    def forward(ctx, src, dst_cuda: bool, index: int, dtype, fmt):
        ctx.src_cuda, ctx.src_dtype = is_standin(src), src.dtype
        ctx.src_index = src._sg_index if ctx.src_cuda else 0
        out = unwrap(src).to(dtype=dtype, copy=True, memory_format=fmt)
        return wrap(out, index) if dst_cuda else out

    @staticmethod
    def backward(ctx, grad):
        g = unwrap(grad).to(ctx.src_dtype)
        return (wrap(g, ctx.src_index) if ctx.src_cuda else g), None, None, None, None


#: aten ops that take host tensors beside CUDA ones on a GPU, so a stand-in mixed with a CPU
#: tensor is no device mismatch there: copies and conversions (the host side of a copy), and
#: indexing with indices/masks on the host (torch moves them to the device itself)
_MIXED_DEVICES_OK = frozenset({
    "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize", "aten::_to_copy",
    "aten::to", "aten::lift_fresh", "aten::lift_fresh_copy", "aten::set_",
    "aten::index", "aten::_unsafe_index", "aten::index_put_", "aten::index_put",
    "aten::_index_put_impl_", "aten::_unsafe_index_put",
    # pack_padded_sequence: the lengths (and batch_sizes afterwards) stay on the host
    "aten::_pack_padded_sequence", "aten::_pad_packed_sequence",
})
_MIXED_MESSAGE = ("Expected all tensors to be on the same device, but found at least two "
                  "devices, cuda:{} and cpu!")


def _check_one_device(func, args, kwargs) -> None:
    """Raise as a GPU does when an op mixes a stand-in with a CPU tensor of dim > 0 (0-dim CPU
    tensors are scalars to torch and allowed anywhere); the CPU kernel would otherwise compute
    an answer the user's GPU never gives."""
    if func._schema.name in _MIXED_DEVICES_OK:
        return
    standin = host = None
    for a in list(args) + list(kwargs.values()):
        for x in (a if isinstance(a, (list, tuple)) else (a,)):
            if not isinstance(x, torch.Tensor):
                continue
            if is_standin(x):
                standin = standin if standin is not None else x
            elif x.device.type == "cpu" and x.dim() > 0:
                host = x
    if standin is not None and host is not None:
        raise RuntimeError(_MIXED_MESSAGE.format(standin._sg_index))


_LAZY_BITS = (torch._C.DispatchKey.Conjugate, torch._C.DispatchKey.Negative)


def _lazy_bits_read():
    """The kernel a dispatch mode runs gets the conjugate and negative bits read again: torch
    calls a mode with them switched off (they were resolved on its inputs), but a composite
    kernel makes conjugate views of its own (``linalg_pinv``'s ``mH``), which are then
    multiplied as if not conjugated (wrong values under any dispatch mode)."""
    exclude = torch._C._dispatch_tls_local_exclude_set()
    for key in _LAZY_BITS:
        exclude = exclude.remove(key)
    return torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), exclude)


class PredictDispatchMode(_Collecting, TorchDispatchMode):
    """Every aten op: stand-ins unwrapped, the table asked, outputs labelled again."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        index = check_ordinal(cuda_index(kwargs.get("device")))
        if (index is None and self._own.forwarding and "device" in kwargs
                and not _has_tensor(args, kwargs)):
            index = self._own.forwarding[-1]  # a factory inside a call on stand-ins
        cuda = index is not None
        if cuda:
            kwargs["device"] = torch.device("cpu")
        pinned = kwargs.get("pin_memory") is True
        if pinned:
            kwargs["pin_memory"] = False
        flat = [a for a in list(args) + list(kwargs.values())]
        touched = cuda or any(is_standin(x) for a in flat
                              for x in (a if isinstance(a, (list, tuple)) else (a,)))
        if touched and not cuda:
            index = _first_index(args, kwargs)
        if touched:
            _check_one_device(func, args, kwargs)
        if touched and func._schema.name != "aten::_to_copy" and not (cuda and not any(
                isinstance(a, torch.Tensor) for a in args)):
            name = op_name(func)
            self.p.decide(name, op_facts(func, args, kwargs),
                          device_kernel=is_device_kernel(func, args, kwargs))
        elif touched and func._schema.name == "aten::_to_copy":
            self._to_copy(args, kwargs, cuda)
        with seeded_draw(func, kwargs) if touched else nullcontext():  # rng.py: "cuda" draws
            with _lazy_bits_read():
                out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
        out = _rewrap(out, args, kwargs, touched, index or 0)
        if func._schema.name in _HOST_OUTPUTS:  # outputs a CUDA kernel leaves on the host
            out = tuple(unwrap(o) if i in _HOST_OUTPUTS[func._schema.name] else o
                        for i, o in enumerate(out))
        if pinned:
            tree_map(lambda o: mark_pinned(o) if isinstance(o, torch.Tensor) else o, out)
        return out

    def _to_copy(self, args, kwargs, to_cuda: bool) -> None:
        """``_to_copy`` issued by torch's own code (e.g. torch.tensor(data, device=...)). Of a
        stand-in it is a conversion on the device, whatever device it names: C++ converts with
        the tensor's own options (``softmax(dtype=)``, ``toType``), whose device is the
        stand-in's real one, the CPU; a move to the host never gets here (C++ sees no move, and
        the function mode makes the user's)."""
        src = args[0]
        src_cuda = is_standin(src)
        dst_cuda = to_cuda or src_cuda
        if src_cuda != dst_cuda:
            self.p.decide("aten::_to_copy", copy_facts(src_cuda, dst_cuda,
                                                       None if src_cuda else src,
                                                       kwargs.get("non_blocking", False)))


class PinningMode(TorchFunctionMode):
    """For a DataLoader's pin-memory thread started while the shim is installed: that thread
    pins each batch with ``Tensor.pin_memory()`` outside any predicting block, which a CPU
    build refuses. Here pinning is what it is inside a block (a copy remembered as pinned), so
    the batch's later ``non_blocking`` upload in the block is predicted as from pinned memory."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        method = _tensor_method(func)
        if method in _PINNING and not is_standin(args[0]):
            return _pinning(method, args[0])
        return func(*args, **(kwargs or {}))
