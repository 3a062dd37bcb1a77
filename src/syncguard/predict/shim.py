"""A ``torch.cuda`` stand-in for CPU builds: the names CUDA code calls, answering as one GPU
would, and reporting the calls that make the host wait.

Streams, events and ``synchronize`` are plain Python in torch.cuda, never tensor ops, so no
torch mode sees them; like ``syncguard.cpupath`` the shim swaps the module's names for the
block's duration and restores them on every exit path. Code that bound a name before the block
(``from torch.cuda import Stream``) keeps the real one and is not seen.

Beside ``torch.cuda``, the shim answers for what asks the same question elsewhere:
``torch.accelerator`` (the DataLoader decides whether to pin by it), the names torch.cuda's own
submodules look up in themselves (``torch.cuda.memory``, ``torch.cuda.nvtx``), the DataLoader's
pin-memory thread, and ``torch.compile``'s CUDA-graph modes. What a CPU build cannot run as on a
GPU (CUDA graphs, ``mem_get_info``) runs as best it can and is reported "not predicted".

The names are swapped process-wide, but each swapped name answers per thread (``_inside``): a
thread that is not inside a block gets torch's own function, as if syncguard were absent.
"""
from __future__ import annotations

import functools
import os
import sys
import threading
from types import SimpleNamespace
from typing import Any

import torch

from syncguard.predict.fakedevice import _NVTX
from syncguard.predict.fakegraphs import _compile
from syncguard.predict.predictor import cannot as _cannot
from syncguard.predict.shimmed import ACCELERATOR_SHIMMED, MEMORY_SHIMMED, SHIMMED
from syncguard.predict.tensors import moving, rebuilding, restoring, saving, swapping
from syncguard.predict.threads import _inside, _pin_threads
from syncguard.predict.torchscript import scripting, tracing

__all__ = ["install", "uninstall"]


def _pinning(original: Any) -> Any:
    """The DataLoader's pin-memory thread (started by a loader made while the shim is
    installed): pinned as inside a block, where a CPU build cannot pin at all, and inside for
    the swapped names too (the loop selects the device with ``torch.accelerator``)."""
    from syncguard.predict.modes import PinningMode

    @functools.wraps(original)
    def loop(*args: Any, **kwargs: Any) -> Any:
        ident = threading.get_ident()
        _pin_threads.add(ident)
        try:
            with PinningMode():
                return original(*args, **kwargs)
        finally:
            _pin_threads.discard(ident)

    return loop


def _generator_class():
    """``torch.Generator`` that gives a CPU generator for ``device="cuda"`` inside a block;
    instances stay real ``torch.Generator`` objects and ``isinstance`` keeps working."""
    import torch

    orig = torch._C.Generator

    class _Meta(type(orig)):
        def __call__(cls, device: Any = "cpu"):
            if not _inside():
                return orig(device)
            kind = getattr(device, "type", device)
            is_cuda = isinstance(kind, int) or str(kind).startswith("cuda")
            return orig("cpu") if is_cuda else orig(device)

        def __instancecheck__(cls, obj):
            return isinstance(obj, orig)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, orig)

    return _Meta("Generator", (orig,), {"__module__": "torch", "__doc__": orig.__doc__})


def _grouping(original):
    """``torch._C._group_tensors_by_device_and_dtype`` (how optimizers and clip_grad_norm_
    split their tensors) reads the C++ device, the CPU for a stand-in: the groups of stand-ins
    are keyed by the CUDA device they stand for, or the caller's ``.to(device)`` would be
    predicted as a copy to the host that a GPU never makes."""
    from syncguard.predict.tensors import is_standin

    def group(tensorlistlist, with_indices=False):
        out = original(tensorlistlist, with_indices)
        fixed = {}
        for (device, dtype), value in out.items():
            first = next((t for t in value[0][0] if t is not None), None) if value[0] else None
            if first is not None and is_standin(first):
                device = torch.device("cuda", first._sg_index)
            fixed[(device, dtype)] = value
        return fixed

    return group


def _per_thread_function(stand_in: Any, original: Any) -> Any:
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        if _inside():
            return stand_in(*args, **kwargs)
        return original(*args, **kwargs)

    return call


def _per_thread_class(stand_in: type, original: type) -> type:
    """A subclass of ``stand_in`` whose calls make a stand-in inside a block and torch's own
    object outside; ``isinstance``/``issubclass`` hold for both (code outside may be handed a
    stand-in stream, and code inside checks ``isinstance(g, torch.cuda.CUDAGraph)``). A user's
    subclass of it is left to the usual rules."""

    class PerThread(type(stand_in)):
        def __call__(cls, *args: Any, **kwargs: Any) -> Any:
            if cls is not swapped:
                return super().__call__(*args, **kwargs)
            return (stand_in if _inside() else original)(*args, **kwargs)

        def __instancecheck__(cls, obj: Any) -> bool:
            if cls is not swapped:
                return super().__instancecheck__(obj)
            return isinstance(obj, stand_in) or isinstance(obj, original)

        def __subclasscheck__(cls, sub: type) -> bool:
            if cls is not swapped:
                return super().__subclasscheck__(sub)
            return issubclass(sub, stand_in) or issubclass(sub, original)

    swapped = PerThread(stand_in.__name__, (stand_in,),
                        {"__module__": stand_in.__module__, "__doc__": stand_in.__doc__,
                         "__qualname__": stand_in.__qualname__})
    return swapped


def _per_thread(stand_in: Any, original: Any) -> Any:
    """``stand_in`` for the threads inside a block, ``original`` (torch's own) for the others
    (see ``_inside``): a function, a class, or a namespace of functions (torch.cuda.nvtx's
    ``_nvtx``). A name torch lacks has no answer of its own to give: the stand-in stays."""
    if original is _MISSING:
        return stand_in
    if isinstance(stand_in, type):
        return _per_thread_class(stand_in, original)
    if callable(stand_in):
        return _per_thread_function(stand_in, original)
    return SimpleNamespace(**{
        name: _per_thread(fn, getattr(original, name, _MISSING))
        for name, fn in vars(stand_in).items()})


def _answering_per_thread(module: Any, table: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    return module, {name: _per_thread(value, vars(module).get(name, _MISSING))
                    for name, value in table.items()}


AUTOCAST_WHY = ("CUDA autocast: the stand-ins run CPU kernels, which CUDA autocast does not "
                "reach, so ops inside keep the dtypes they would have without it where a GPU "
                "runs them in {dtype}; the region's dtypes, and what depends on them, differ "
                "from a GPU run")


def _autocast_enter(original: Any) -> Any:
    """``torch.autocast("cuda")`` (and ``torch.cuda.amp.autocast``, a subclass) entered: runs
    as it is, reported "not predicted". Mapping it to CPU autocast would not be CUDA's
    behaviour either: the two cast different op lists (and CPU autocast knows no float16 for
    some ops), so the dtypes would still differ from a GPU's, only less visibly."""

    @functools.wraps(original)
    def enter(self: Any) -> Any:
        if getattr(self, "device", None) == "cuda" and getattr(self, "_enabled", False):
            dtype = str(getattr(self, "fast_dtype", None)).replace("torch.", "")
            _cannot("torch.autocast", AUTOCAST_WHY.format(dtype=dtype))
        return original(self)

    return enter


_AUTOCAST_MODE = os.path.join("torch", "amp", "autocast_mode.py")


def _set_autocast_enabled(original: Any) -> Any:
    """``torch.set_autocast_enabled`` called directly: turning CUDA autocast on does to the
    stand-ins what ``torch.autocast("cuda")`` does (nothing, where a GPU changes dtypes), so a
    thread inside a block is told the same "not predicted" (``AUTOCAST_WHY``). This torch takes
    ``(device_type, enabled)`` and the legacy ``(enabled)``, which means CUDA. Calls from
    torch's autocast class are left to ``_autocast_enter`` (its ``__enter__`` sets the flag, and
    its ``__exit__`` restores a state already reported), CPU autocast and turning it off are no
    CUDA autocast, and other threads get torch's own function unchanged."""

    @functools.wraps(original)
    def set_enabled(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)  # torch's own checks and errors first
        if _inside() and not sys._getframe(1).f_code.co_filename.endswith(_AUTOCAST_MODE):
            if args and isinstance(args[0], str):
                device, rest = args[0], args[1:]
            else:
                device, rest = kwargs.get("device_type", "cuda"), args
            enabled = rest[0] if rest else kwargs.get("enabled")
            if device == "cuda" and enabled:
                dtype = str(torch.get_autocast_dtype("cuda")).replace("torch.", "")
                _cannot("torch.set_autocast_enabled", AUTOCAST_WHY.format(dtype=dtype))
        return out

    return set_enabled


def _targets() -> list[tuple[Any, dict[str, Any]]]:
    """Each module the shim swaps names in, with its stand-ins (built at install: some wrap
    what they replace). The device APIs answer per thread (``_per_thread``); the pin loop runs
    on a thread of its own, inside by its own rule; ``torch.Generator``, ``torch.compile``,
    ``torch.load``'s restore location and a storage's move to CUDA ask ``_inside`` themselves
    (``torch._utils._rebuild_tensor`` changes only tensors on storages a block's ``torch.load``
    restored to CUDA); the grouping
    only relabels stand-ins, which torch's own grouping cannot tell from CPU tensors, and
    ``Module._apply``'s subclass question answers differently only for stand-ins, so both are
    the same for every thread."""
    import torch.cuda.memory
    import torch.cuda.nvtx
    import torch.utils.data._utils.pin_memory as pin

    out = [_answering_per_thread(torch.cuda, SHIMMED),
           _answering_per_thread(torch.cuda.memory, MEMORY_SHIMMED),
           _answering_per_thread(torch.cuda.nvtx, {"_nvtx": _NVTX})]
    acc = getattr(torch, "accelerator", None)
    if acc is not None:
        out.append(_answering_per_thread(
            acc, {k: v for k, v in ACCELERATOR_SHIMMED.items() if hasattr(acc, k)}))
    out.append((pin, {"_pin_memory_loop": _pinning(pin._pin_memory_loop)}))
    import torch.serialization as serialization

    out.append((torch, {"Generator": _generator_class(), "compile": _compile(torch.compile),
                        "save": saving(torch.save)}))
    out.append((serialization, {"default_restore_location": restoring(
        serialization.default_restore_location, _inside)}))
    out.append((torch._utils, {"_rebuild_tensor": rebuilding(torch._utils._rebuild_tensor)}))
    out.append((torch.storage, {"_to": moving(torch.storage._to, _inside)}))
    import torch.nn.modules.module as module

    out.append((module, {"is_traceable_wrapper_subclass": swapping(
        module.is_traceable_wrapper_subclass)}))
    import torch.jit

    out.append((torch.jit, {"script": scripting(torch.jit.script),
                            "trace": tracing(torch.jit.trace)}))
    autocast = torch.amp.autocast_mode.autocast
    out.append((autocast, {"__enter__": _autocast_enter(autocast.__enter__)}))
    out.append((torch, {"set_autocast_enabled": _set_autocast_enabled(
        torch.set_autocast_enabled)}))
    out.append((torch._C, {"_group_tensors_by_device_and_dtype": _grouping(
        torch._C._group_tensors_by_device_and_dtype)}))
    return out


_lock = threading.Lock()
_depth = 0
_saved: list[tuple[Any, str, Any]] = []  # (module, name, what it held or _MISSING)
_saved_state: dict[str, Any] = {}  # process-wide settings other than names (install())
INDUCTOR_CACHE = "TORCHINDUCTOR_CACHE_DIR"
_MISSING = object()


def install() -> None:
    """Swap the names in (reference-counted: nested and concurrent blocks share one swap)."""
    global _depth

    with _lock:
        _depth += 1
        if _depth > 1:
            return
        try:
            for module, table in _targets():
                for name, value in table.items():
                    _saved.append((module, name, vars(module).get(name, _MISSING)))
                    setattr(module, name, value)
        except BaseException:
            _restore_names()
            _depth -= 1
            raise
        # Process-wide state, saved with the names (first install) and put back with them (last
        # uninstall): per block, one thread's exit undid it under another thread's open block.
        # torch sets INDUCTOR_CACHE while a function mode first imports torch._dynamo, and every
        # subprocess the program starts afterwards would inherit it.
        _saved_state["env"] = os.environ.get(INDUCTOR_CACHE)


def _restore_names() -> None:
    """Put every swapped name back, last swapped first (a name absent before is removed)."""
    while _saved:
        module, name, value = _saved.pop()
        if value is _MISSING:
            vars(module).pop(name, None)
        else:
            setattr(module, name, value)


def uninstall() -> None:
    global _depth

    with _lock:
        _depth -= 1
        if _depth > 0:
            return
        _restore_names()
        env = _saved_state.pop("env")
        if env is None:
            os.environ.pop(INDUCTOR_CACHE, None)
        else:
            os.environ[INDUCTOR_CACHE] = env
