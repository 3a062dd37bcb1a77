"""Tensors that stand for CUDA tensors while their data lives on the CPU.

Why a wrapper subclass whose *C++* device is the CPU: a CPU build of torch refuses a CUDA
device long before dispatch (device guards in the Python bindings, lazy-init asserts), so a
tensor that told C++ it was on CUDA could not even be indexed. The stand-in therefore keeps the
CPU as its real device and answers ``.device``, ``.is_cuda`` and ``.get_device()`` as a CUDA
tensor would, at the Python level, where user code reads them. What it "would be on" travels
through dispatch because every op on a stand-in reaches the predictor's dispatch mode, which
unwraps, runs the CPU kernel and wraps the outputs again (the shape of ``FakeTensor``).

Which host memory would be pinned is in :mod:`syncguard.predict.copies`.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import os
import re
import sys
import threading
import weakref

import torch
from torch.utils._pytree import tree_map

from syncguard.predict.copies import copy_facts
from syncguard.predict.predictor import active, cannot, decide, everyone
from syncguard.predict.rules import op_name

__all__ = ["CudaStandIn", "wrap", "unwrap", "is_standin", "dispatch_unobserved", "FREES",
           "torch_reads_host"]

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_HOST = torch.device("cpu")
_forwarded = threading.local()


@contextlib.contextmanager
def torch_reads_host():
    """While the function mode runs a torch function on stand-ins (its mode off), torch's own
    Python code in that call reads a stand-in's ``device`` as the host. Such code makes tensors
    ``device=input.device`` (``embedding_bag``'s ``arange``): a CUDA device there reaches the C++
    binding, which calls the shimmed ``torch.cuda._lazy_init`` and then marks CUDA initialised for
    the whole process, so after the block a CPU build's ``torch.ones(2, device="cuda")`` no longer
    raises torch's own error. The host device never reaches that flag; the dispatch mode labels
    what such a call makes as the stand-ins' device, as it does every factory inside a call on
    stand-ins. User code (a hook run from inside the call) still reads the CUDA device."""
    _forwarded.depth = getattr(_forwarded, "depth", 0) + 1
    try:
        yield
    finally:
        _forwarded.depth -= 1


def _read_by_torch_in_a_call() -> bool:
    """Whether the ``device`` being read is read by torch's own code inside ``torch_reads_host``
    (frame 2: the reader of the property that called this)."""
    return (getattr(_forwarded, "depth", 0) > 0
            and sys._getframe(2).f_code.co_filename.startswith(_TORCH_DIR))


class CudaStandIn(torch.Tensor):
    """A tensor that would be on ``cuda:<index>``; its data is ``self._sg_elem`` on the CPU."""

    _sg_elem: torch.Tensor
    _sg_index: int

    @staticmethod
    def __new__(cls, elem: torch.Tensor, index: int = 0):
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.shape, strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, layout=elem.layout, device=elem.device,
            requires_grad=elem.requires_grad)
        r._sg_elem = elem.detach() if elem.requires_grad else elem
        r._sg_index = index
        # The lazy conjugate and negative bits live on the tensor torch dispatches, so they are
        # the stand-in's too: torch resolves them before an op reaches the predictor's modes,
        # as it does for a CUDA tensor (inside a mode, torch no longer reads them on the data)
        if elem.is_conj():
            torch._C._set_conj(r, True)
        if elem.is_neg():
            torch._C._set_neg(r, True)
        FREES.track(r, elem)
        return r

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # Reached only where no predicting() dispatch mode is active (another thread, or a
        # stand-in kept past the block): run on the CPU, keep the CUDA label, and let the
        # predictor say it could not see this op.
        return dispatch_unobserved(func, args, kwargs or {})

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        if _read_by_torch_in_a_call():
            return _HOST  # see torch_reads_host
        return torch.device("cuda", self._sg_index)

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True

    @property
    def is_cpu(self) -> bool:  # type: ignore[override]
        return False

    def get_device(self) -> int:  # type: ignore[override]
        return self._sg_index

    def __repr__(self, *, tensor_contents=None) -> str:  # type: ignore[override]
        """Inside a predicting block, torch's own printing runs on the stand-in, so the ops it
        issues (one ``.item()`` per printed element, ``nonzero`` for the summary) are seen and
        predicted as on a GPU; outside, the data with its label."""
        if active() is not None:  # _str would switch the predictor's modes off: _str_intern
            with torch.no_grad():
                text = torch._tensor_str._str_intern(self, tensor_contents=tensor_contents)
            return "tensor(" + text[len(type(self).__name__) + 1:]
        return f"{self._sg_elem!r} (predicted on cuda:{self._sg_index})"

    def __reduce_ex__(self, proto):
        """Pickled (``torch.save``) as a GPU pickles a CUDA tensor: its storage filed under
        ``cuda:<index>`` (torch's own ``_fake_device`` hook for tensors whose data is elsewhere)
        with this tensor's CPU data, so the file loads where a GPU's does, and with
        ``map_location="cpu"`` anywhere. Writing a CUDA storage copies it to the host first
        (``UntypedStorage.cpu()``: an ``aten::copy_`` from the device into pageable memory, which
        waits): predicted once per storage by that measured copy's rule, never clean."""
        saved = _saved_storages()
        elem = self._sg_elem
        fn, args = elem.__reduce_ex__(proto)[:2]
        if fn is not torch._utils._rebuild_tensor_v2 or type(elem) is not torch.Tensor:
            cannot("torch.save", "saving this kind of CUDA tensor (dtype or layout) is not "
                   "modelled: it is written as a CPU tensor, and its copy to the host is not "
                   "predicted")
            return fn, args
        storage = args[0]
        storage._fake_device = torch.device("cuda", self._sg_index)
        key = storage._untyped_storage._cdata
        if saved is None or key not in saved:
            _copy_predicted(True, False)
            if saved is not None:
                saved.add(key)
        args = (storage, args[1], args[2], args[3], self.requires_grad and not self.__dict__.get(
            "_is_param"), *args[5:])
        if self.__dict__.get("_is_param"):  # a Parameter stand-in (Module.cuda()): a Parameter
            return torch._utils._rebuild_parameter, (_Reduced(fn, args), self.requires_grad,
                                                     collections.OrderedDict())
        return fn, args

    def __format__(self, spec: str) -> str:
        # torch.Tensor.__format__ formats 0-dim tensors by .item() only for exact Tensors
        if self.dim() == 0:
            return self.item().__format__(spec)
        return object.__format__(self, spec)


class _Reduced:
    """Pickles as ``fn(*args)``: a stand-in's data inside a Parameter's reduction."""

    def __init__(self, fn, args) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


_saving = threading.local()


def _saved_storages() -> set | None:
    """The storages already written by the ``torch.save`` running on this thread (None outside
    one, e.g. ``pickle.dumps``): a storage two tensors share is written, and copied, once."""
    return getattr(_saving, "keys", None)


def saving(save):
    """``torch.save`` with one set of written storages per call (see ``_saved_storages``)."""

    @functools.wraps(save)
    def wrapper(*args, **kwargs):
        outer = _saved_storages()
        _saving.keys = set() if outer is None else outer
        try:
            return save(*args, **kwargs)
        finally:
            _saving.keys = outer

    return wrapper


def _cuda_target(location) -> bool:
    """Whether torch's registry restores to ``location`` by its CUDA deserializer (the test of
    ``torch.serialization._deserialize``)."""
    return isinstance(location, str) and (location == "cuda"
                                          or bool(re.match("cuda(:|[0-9]+)", location)))


def restoring(restore, inside):
    """``torch.serialization.default_restore_location``, where ``torch.load`` hands each storage
    with the target its ``map_location`` resolved to (torch's own ``_get_restore_location``:
    None is the saved tag; a string, a device or a dict of tags; a callable's None falls back to
    the saved tag). For a thread ``inside()`` a block and a CUDA target it does what the GPU
    does there without the device: torch validates the device (``_validate_device``, answered
    by the shimmed ``torch.cuda``, so ``cuda:1`` raises what a one-GPU machine raises), then
    ``storage.to(device)`` copies the storage from the pageable host memory it was read into to
    the device, one blocking upload per storage (torch.load restores a storage once, however
    many tensors share it). The copy is the storage's ``aten::copy_``, h2d from pageable
    memory, blocking: so the library corpus's ``torch_load`` snippet runs on a GPU, and its rule
    is what predicts it here; the storage
    stays on the CPU, tagged with the index, and ``_rebuild_tensor`` turns each tensor built on
    it into a stand-in. Every other call is torch's own."""
    import torch.serialization as serialization

    @functools.wraps(restore)
    def wrapper(storage, location):
        if not inside() or not _cuda_target(location):
            return restore(storage, location)
        device = serialization._validate_device(location, "cuda")
        _copy_predicted(False, True)
        storage._sg_cuda_index = device.index or 0
        return storage

    return wrapper


def rebuilding(rebuild):
    """``torch._utils._rebuild_tensor``, which every tensor rebuild of ``torch.load`` (weights
    only or not, ``_rebuild_tensor_v2`` and kin) goes through: a tensor on a storage that
    ``restoring`` put on ``cuda:<N>`` is a stand-in on ``cuda:<N>`` (a Parameter rebuilt from it
    is then a Parameter stand-in, as ``Module.cuda()`` makes). Only storages ``restoring`` tagged
    differ, so other callers and threads get torch's own result."""

    @functools.wraps(rebuild)
    def wrapper(storage, storage_offset, size, stride):
        out = rebuild(storage, storage_offset, size, stride)
        index = getattr(getattr(storage, "_untyped_storage", storage), "_sg_cuda_index", None)
        return out if index is None else wrap(out, index)

    return wrapper


def swapping(is_subclass):
    """``torch.nn.modules.module.is_traceable_wrapper_subclass``, which ``Module._apply`` asks
    of each converted parameter: true for a stand-in. torch then swaps the stand-in into the
    Parameter object (``torch.utils.swap_tensors``), as it does for its own tensor subclasses,
    so ``Module.cuda()`` keeps each Parameter, and an optimizer built before the move trains the
    moved weights, as ``.data`` does on a GPU (a wrapper subclass cannot take ``.data``). Every
    other conversion keeps torch's own path: ``m.double()`` of a CPU module whose parameters a
    graph still holds sets ``.data`` as without syncguard, where torch's process-wide swap
    setting would poison that graph. Only stand-ins answer differently, so every thread gets
    the same answer."""

    @functools.wraps(is_subclass)
    def wrapper(t):
        return isinstance(t, CudaStandIn) or is_subclass(t)

    return wrapper


def _copy_predicted(src_cuda: bool, dst_cuda: bool, non_blocking: bool = False) -> None:
    """Decide a copy a storage makes (not a tensor op the dispatch mode sees): the storage's
    ``aten::copy_``, as torch.save's and torch.load's run on a GPU, with host memory pageable."""
    decide("aten::copy_", copy_facts(src_cuda, dst_cuda, None, non_blocking))


def moving(to, inside):
    """``torch.storage._to``, which ``UntypedStorage.cuda()``/``.to(device=...)`` (and a typed
    storage's, through its untyped one) call: the old checkpoint idiom
    ``torch.load(f, map_location=lambda s, loc: s.cuda())`` lands here. For a thread ``inside()``
    a block, a CPU storage going to CUDA does what torch's ``_to`` does on a GPU, without the
    device: it selects the device (``torch.cuda.device``, the shim's, so ``cuda:1`` raises what
    a one-GPU machine raises), copies the storage, and gives a new storage, on the CPU here,
    tagged with the index as ``restoring`` tags one, so ``torch.load`` rebuilds its tensors as
    stand-ins. The copy of an untagged storage is an upload from pageable host memory (the
    storage's ``aten::copy_``, h2d, blocking unless ``non_blocking``, as the library corpus's
    ``torch_load_storage_cuda`` snippet runs on a GPU); a tagged one is copied on the device. torch
    returns the storage itself only when ``device`` equals its device, index included:
    ``.cuda(0)`` asks for ``cuda`` without an index (torch's ``cuda()`` drops a 0), so it copies
    (``tools/probe_device_apis.py`` checks ``storage.cuda().cuda(0)`` on a GPU). Only ``torch.load``'s rebuild reads the tag: a storage moved outside it still
    reports the CPU as its device. Every other call is torch's own."""

    @functools.wraps(to)
    def wrapper(self, device, non_blocking=False):
        if not inside() or device.type != "cuda" or self.device.type != "cpu":
            return to(self, device, non_blocking)
        tag = getattr(self, "_sg_cuda_index", None)
        if tag is not None and device.index == tag:
            return self
        with torch.cuda.device(device):
            index = torch.cuda.current_device()
        _copy_predicted(tag is not None, True, non_blocking)  # tagged: on the device already
        moved = self.clone()
        moved._sg_cuda_index = index
        return moved

    return wrapper


def dispatch_unobserved(func, args, kwargs):
    """A stand-in used where no dispatch mode is active: compute it, keep it labelled, and
    tell every open predictor it ran unseen."""
    for p in everyone():
        p.cannot(op_name(func), f"{op_name(func)} ran on a CUDA tensor outside the predicting "
                                "thread or block; its syncs are not predicted")
    out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs))
    return _rewrap(out, args, kwargs, True, 0)


def _rewrap(out, args, kwargs, cuda: bool, index: int):
    """Outputs that are an input's data come back as that input (in-place ops return self);
    new tensors of a CUDA call become stand-ins."""
    by_id = {}
    for a in list(args) + list(kwargs.values()):
        for x in (a if isinstance(a, (list, tuple)) else (a,)):
            if isinstance(x, torch.Tensor):
                by_id[id(unwrap(x))] = x

    def back(o):
        if not isinstance(o, torch.Tensor):
            return o
        if id(o) in by_id:
            return follow(by_id[id(o)], o)
        return wrap(o, index) if cuda else o

    return tree_map(back, out)


def follow(standin, elem):
    """``standin`` after an in-place op changed the geometry of its data ``elem``
    (``unsqueeze_``, ``t_``, ``resize_``, ``as_strided_``, an ``out=`` tensor resized): the
    stand-in takes the new sizes, strides and offset, as the CUDA tensor's own would change. Set
    below torch's dispatch (no mode, no autograd, no version bump: the op itself counted)."""
    if not isinstance(standin, CudaStandIn) or standin._sg_elem is not elem:
        return standin
    if (standin.shape == elem.shape and standin.stride() == elem.stride()
            and standin.storage_offset() == elem.storage_offset()):
        return standin
    with torch._C._DisableTorchDispatch(), torch._C._AutoDispatchBelowADInplaceOrView():
        standin.set_(elem.untyped_storage(), elem.storage_offset(), elem.shape, elem.stride())
    return standin


def is_standin(x) -> bool:
    return isinstance(x, CudaStandIn)


def wrap(t, index: int = 0):
    """Label a CPU tensor as a CUDA tensor (stand-ins pass through)."""
    if isinstance(t, torch.Tensor) and not isinstance(t, CudaStandIn):
        return CudaStandIn(t, index)
    return t


def unwrap(x):
    return x._sg_elem if isinstance(x, CudaStandIn) else x


# ---------------------------------------------------------------------------------------------
# Device memory given back to the caching allocator: what makes empty_cache() call cudaFree

class _Alive:
    """A weak-referenceable marker of one stand-in's life (see _Frees.track)."""


class _Frees:
    """Counts storages of stand-ins whose last stand-in died: on a GPU their blocks would sit
    in the caching allocator, and ``torch.cuda.empty_cache()`` would release them (cudaFree,
    which waits for the device)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[int, int] = {}
        self.freed_bytes = 0

    def track(self, standin: CudaStandIn, elem: torch.Tensor) -> None:
        try:
            storage = elem.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return
        key, nbytes = storage.data_ptr(), storage.nbytes()
        if not nbytes:
            return
        with self._lock:
            self._live[key] = self._live.get(key, 0) + 1
        # The elem keeps the storage alive as long as the stand-in lives. The finalizer watches
        # a token in the stand-in's __dict__, not the tensor: torch.utils.swap_tensors (how
        # Module.cuda() keeps a Parameter's identity) refuses tensors with weak references,
        # and moves __dict__, so the token dies with whichever object holds the data.
        token = standin.__dict__["_sg_alive"] = _Alive()
        weakref.finalize(token, self._release, key, nbytes)

    def _release(self, key: int, nbytes: int) -> None:
        with self._lock:
            left = self._live.get(key, 1) - 1
            if left <= 0:
                self._live.pop(key, None)
                self.freed_bytes += nbytes
            else:
                self._live[key] = left

    def take(self) -> int:
        """Bytes freed since the last call (what an empty_cache() would release)."""
        with self._lock:
            freed, self.freed_bytes = self.freed_bytes, 0
            return freed


FREES = _Frees()
