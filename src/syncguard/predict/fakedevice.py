"""The stand-ins for the device's other questions: properties, selection, memory, random
state, NVTX markers, and ``torch.accelerator``'s functions that differ from torch.cuda's."""
from __future__ import annotations

import collections
from types import SimpleNamespace
from typing import Any

from syncguard.predict import rng
from syncguard.predict.devices import check_ordinal
from syncguard.predict.fakestreams import _ordinal, _device_id, _stats_device, _synchronize
from syncguard.predict.predictor import decide as _decide
from syncguard.predict.tensors import FREES


def _empty_cache() -> None:
    _decide("torch.cuda.empty_cache", {"cached_free": FREES.take() > 0})


def _get_rng_state(device: Any = "cuda") -> Any:
    """The state comes back as a host ByteTensor, as on a GPU (but the stand-ins' CPU
    generator's, see rng.py); whether reading it waits is the table's answer (a run measured
    it)."""
    _decide("torch.cuda.get_rng_state")
    return rng.GENERATOR.get_state()


def _set_rng_state(new_state: Any, device: Any = "cuda") -> None:
    _decide("torch.cuda.set_rng_state")
    rng.GENERATOR.set_state(new_state)


def _manual_seed(seed: Any) -> None:
    """Seeds the stand-ins' generator (rng.py): the same seed, the same "cuda" draws here,
    though not a GPU's values."""
    rng.GENERATOR.manual_seed(int(seed))


_PROPS = SimpleNamespace(name="predicted CUDA device (syncguard)", major=9, minor=0,
                         total_memory=80 << 30, multi_processor_count=132)


def _get_device_properties(device: Any = None) -> SimpleNamespace:
    _device_id(device)
    return _PROPS


def _get_device_name(device: Any = None) -> str:
    return _get_device_properties(device).name


def _get_device_capability(device: Any = None) -> tuple[int, int]:
    props = _get_device_properties(device)
    return props.major, props.minor


def _set_device(device: Any) -> None:
    _ordinal(device)  # negative: a no-op, as in torch


def _exchange_device(device: int) -> int:
    """What ``torch.cuda.device(i)`` / ``device_of(t)`` call on entry: device 0 is the only
    one, so selecting it changes nothing; -1 is torch's "no device"; beyond: torch's error."""
    if device is None or device < 0:
        return -1
    check_ordinal(device)
    return 0


def _maybe_exchange_device(device: int) -> int:
    return -1 if device is None or device < 0 else 0


def _mem_get_info(device: Any = None) -> tuple[int, int]:
    """cudaMemGetInfo, a CUDA runtime call no committed run measured: the table answers "not
    predicted" (unless a later run measures it); the answer is a plausible idle device."""
    _ordinal(device)
    _decide("torch.cuda.mem_get_info")
    return _PROPS.total_memory, _PROPS.total_memory


def _memory_stats(device: Any = None) -> dict:
    """The caching allocator's counters (host-side bookkeeping, no CUDA call): nothing is
    allocated on a device here, so every statistic reads 0 (torch.cuda.memory's own
    memory_allocated and kin read them from here)."""
    _stats_device(device)
    return collections.defaultdict(int)


def _memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    index = _stats_device(device)
    rule = "=" * 75
    return (f"|{rule}|\n| PyTorch CUDA memory summary, device ID {index}: predicted by syncguard "
            f"on a CPU, no device memory is allocated |\n|{rule}|\n")


def _zero(device: Any = None) -> int:
    _stats_device(device)
    return 0


def _reset(device: Any = None) -> None:
    _stats_device(device)


# ---------------------------------------------------------------------------------------------
# NVTX: host-side markers for a profiler, no device work. What torch answers on a GPU with no
# profiler attached: push/pop -2, range_start 0, mark None.

_NVTX = SimpleNamespace(
    rangePushA=lambda msg: -2, rangePop=lambda: -2, markA=lambda msg: None,
    rangeStartA=lambda msg: 0, rangeEnd=lambda range_id: None,
    deviceRangeStart=lambda msg, stream=0: None,
    deviceRangeEnd=lambda handle, stream=0: None)


def _seed() -> None:
    rng.GENERATOR.seed()


class _DeviceIndex:
    """``torch.accelerator.device_index(i)``: device 0 is the only one."""

    def __init__(self, device: int | None, /) -> None:
        self.idx = device

    def __enter__(self) -> None:
        if self.idx is not None:
            _exchange_device(self.idx)

    def __exit__(self, *exc: object) -> bool:
        return False


def _acc_synchronize(device: Any = None, /) -> None:
    """torch.accelerator.synchronize on CUDA is the device synchronize torch.cuda.synchronize
    makes (cudaDeviceSynchronize): the same measured rule answers."""
    _synchronize(device)


def _acc_empty_host_cache() -> None:
    _decide("torch.accelerator.empty_host_cache")  # cudaFreeHost of cached blocks: unmeasured


def _acc_get_device_capability(device: Any = None, /) -> dict:
    """``torch.accelerator.get_device_capability`` (a dict of supported dtypes, not
    torch.cuda's (major, minor)). On CUDA it reaches the device guard's getDeviceCapability,
    which CUDA's guard does not override (c10/cuda/impl/CUDAGuardImpl.h), so a GPU raises c10's
    default error, for device 1 of a one-GPU machine too (tools/probe_device_apis.py checks
    it on a GPU). The device is parsed first, by
    torch.accelerator's own parser, as torch does (a "cpu" device raises its ValueError)."""
    from torch.accelerator._utils import _get_device_index

    _get_device_index(device, optional=True)
    raise RuntimeError("Backend doesn't support getting device capabilities.")
