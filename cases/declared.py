"""What each merge variant in ``cases/merge.py`` is declared to do, as data: the kinds of sync it
may be reported with, the exact number of host waits one call makes, and the dtypes it supports.

The tests check the code against these tables; nothing here is computed from the variants
themselves (a test's expected values never come from the code under test). Every entry says where
it was measured; an entry that was not measured says so, and the GPU run that first checks it
either confirms it or fails naming the entry to fix.

Version ranges: each table is ``((since (major, minor), value), ...)`` in version order; the last
entry whose version is <= the running torch applies. Pre-releases count as their release
(``2.9.0a0`` is 2.9): nightlies carry the change.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from syncguard.records.events import BLOCKING_COPY_D2H, BLOCKING_COPY_H2D, PAGEABLE_COPY, STREAM_SYNC

__all__ = [
    "VARIANT_NAMES", "NAN_CANONICALISED_WHEN_DETERMINISTIC", "DECLARED_SYNCS", "DETERMINISTIC_SYNCS", "expected_syncs",
    "Waits", "DECLARED_WAITS", "DETERMINISTIC_WAITS", "expected_waits",
    "YES", "NO", "NOT_ONE_ELEMENT", "DtypeSupport", "DTYPE_SUPPORT", "declared_dtype_support",
    "major_minor",
]

VARIANT_NAMES = ("index_put_cpu_mask", "masked_scatter", "index_put_gpu_mask", "index_copy_rows",
                 "triton_row_scatter", "triton_device_rows")


def major_minor(torch_version: Any) -> tuple[int, int]:
    m = re.match(r"\s*(\d+)\.(\d+)", str(torch_version))
    if not m:
        raise ValueError(f"cannot read a torch version from {torch_version!r}")
    return int(m[1]), int(m[2])


def _check_variant(variant: str) -> None:
    if variant not in VARIANT_NAMES:
        raise ValueError(f"unknown variant {variant!r}; choose from {', '.join(VARIANT_NAMES)}")


def _in_force(table: tuple, torch_version: Any):
    version = major_minor(torch.__version__ if torch_version is None else torch_version)
    value = None
    for since, declared in table:
        if version >= since:
            value = declared
    return value


# ---------------------------------------------------------------------------------------------
# Kinds: which kinds syncguard may report for a variant's waits

# The trace detector cannot see the direction of a copy made inside an aten op and names its
# wait a device-to-host read (blocking_copy_d2h); the profile detector names it exactly.
_COPY_AND_WAIT_H2D = frozenset({BLOCKING_COPY_H2D, PAGEABLE_COPY, STREAM_SYNC, BLOCKING_COPY_D2H})
_NONZERO = frozenset({BLOCKING_COPY_D2H, STREAM_SYNC})

#: ``None`` = no sync at all; a frozenset = the kinds of sync syncguard may report for it (one op
#: can be named by more than one kind: nonzero's wait is a blocking D2H copy to the trace
#: detector, a stream sync to the debug detector).
DECLARED_SYNCS: dict[str, tuple[tuple[tuple[int, int], frozenset | None], ...]] = {
    "index_put_cpu_mask": (((0, 0), _COPY_AND_WAIT_H2D), ((2, 9), None)),
    "masked_scatter": (((0, 0), None),),
    "index_put_gpu_mask": (((0, 0), _NONZERO),),
    "index_copy_rows": (((0, 0), None),),
    "triton_row_scatter": (((0, 0), None),),
    # by design (cases/device_rows.py): one pinned H2D copy, cudaEventQuery/Record, one kernel
    "triton_device_rows": (((0, 0), None),),
}

#: Overrides under ``torch.use_deterministic_algorithms(True)`` (same shape). Measured on the
#: H200 (torch 2.8.0, 2.11.0, 2.14.1; test_deterministic_kernels_canonicalise_nan): the
#: deterministic index_put kernel (sort-based) waits for the device even with a CPU mask.
DETERMINISTIC_SYNCS: dict[str, tuple[tuple[tuple[int, int], frozenset | None], ...]] = {
    "index_put_cpu_mask": (((0, 0), _COPY_AND_WAIT_H2D),),
}


#: Variants whose deterministic CUDA kernel is not a bit copy: it rewrites NaN payloads to the
#: canonical NaN (measured on the H200, torch 2.11: float16 payload 0x7f55 came out 0x7fff for
#: index_put_ with a device mask and for index_copy_). Their results are compared with NaNs
#: canonicalised in that mode, and test_deterministic_kernels_canonicalise_nan pins the finding.
NAN_CANONICALISED_WHEN_DETERMINISTIC = frozenset({"index_put_cpu_mask", "index_put_gpu_mask",
                                                  "index_copy_rows"})


def expected_syncs(variant: str, torch_version: Any = None, *,
                   deterministic: bool = False) -> frozenset | None:
    """The kinds of sync ``variant`` is declared to make on ``torch_version`` (default: the
    running torch); ``None`` means it must not sync at all."""
    _check_variant(variant)
    table = DECLARED_SYNCS[variant]
    if deterministic and variant in DETERMINISTIC_SYNCS:
        table = DETERMINISTIC_SYNCS[variant]
    return _in_force(table, torch_version)


# ---------------------------------------------------------------------------------------------
# Exact counts: host waits per call on the representative inputs

@dataclass(frozen=True)
class Waits:
    """Host waits of one call, counted per CUDA runtime call that waited.

    Counted by API (``cudaStreamSynchronize``...) rather than by syncguard kind: the kind of a
    wait inside an aten op depends on the detectors (trace says ``blocking_copy_d2h`` where the
    profiler says ``blocking_copy_h2d``), the runtime call that blocked does not.
    """

    counts: Mapping[str, int]
    measured: str  # where the count was measured, or "NOT MEASURED: ..." and what was assumed

    @property
    def total(self) -> int:
        return sum(self.counts.values())


_NONE_MEASURED = "0: H200, torch 2.8.0, 2.11.0, 2.14.1 (test_declared_sync, merge benchmarks)"

#: Per call of ``cases.merge.representative_inputs(variant, 4096, 2048)`` (bf16, half the tokens
#: multimodal in 1024-token runs), after one warm-up call, torch's default (non-deterministic)
#: algorithms. The merge benchmarks confirm one wait per call at 8192x4096 and 131072x8192 too
#: (111 waits for 10 warm-up + 100 timed + 1 memory run).
DECLARED_WAITS: dict[str, tuple[tuple[tuple[int, int], Waits], ...]] = {
    "index_put_cpu_mask": (
        ((0, 0), Waits({"cudaStreamSynchronize": 1},
                       "H200, torch 2.8.0 (pageable H2D copy of the mask's indices + its wait); "
                       "2.9/2.10 NOT MEASURED")),
        ((2, 9), Waits({}, "0: H200, torch 2.11.0, 2.14.1; 2.9/2.10 NOT MEASURED")),
    ),
    "masked_scatter": (((0, 0), Waits({}, _NONE_MEASURED)),),
    "index_put_gpu_mask": (
        ((0, 0), Waits({"cudaStreamSynchronize": 1},
                       "H200, torch 2.8.0, 2.11.0, 2.14.1 (nonzero's count read)")),
    ),
    "index_copy_rows": (((0, 0), Waits({}, _NONE_MEASURED)),),
    "triton_row_scatter": (((0, 0), Waits({}, _NONE_MEASURED)),),
    "triton_device_rows": (((0, 0), Waits({}, "NOT MEASURED: 0 by design (no host read of "
                                               "device data; staging slots reused after "
                                               "cudaEventQuery, which never waits)")),),
}

_DET_NOT_AT_SIZE = ("measured at 8x4 float16 on the H200, torch 2.8.0, 2.11.0, 2.14.1 "
                    "(test_deterministic_kernels_canonicalise_nan); at the representative size "
                    "NOT MEASURED")

#: Under ``torch.use_deterministic_algorithms(True)``, same inputs. Overrides per variant.
DETERMINISTIC_WAITS: dict[str, tuple[tuple[tuple[int, int], Waits], ...]] = {
    "index_put_cpu_mask": (((0, 0), Waits({"cudaStreamSynchronize": 1}, _DET_NOT_AT_SIZE)),),
    "index_put_gpu_mask": (((0, 0), Waits({"cudaStreamSynchronize": 1}, _DET_NOT_AT_SIZE)),),
    "masked_scatter": (((0, 0), Waits({}, "0 in hypothesis examples under forbid(), H200 "
                                          "torch 2.11.0; at the representative size NOT "
                                          "MEASURED")),),
    "index_copy_rows": (((0, 0), Waits({}, _DET_NOT_AT_SIZE)),),
}


def expected_waits(variant: str, torch_version: Any = None, *,
                   deterministic: bool = False) -> Waits:
    """The exact host waits of one call of ``variant`` on the representative inputs."""
    _check_variant(variant)
    table = DECLARED_WAITS[variant]
    if deterministic and variant in DETERMINISTIC_WAITS:
        table = DETERMINISTIC_WAITS[variant]
    waits = _in_force(table, torch_version)
    if waits is None:
        raise ValueError(f"no wait count declared for {variant} on torch {torch_version}")
    return waits


# ---------------------------------------------------------------------------------------------
# Dtypes: what each variant runs with, per device and torch version

YES = "yes"
NO = "no"
#: runs, except when the merged values are a single element: index_put_ then takes its
#: ``masked_fill`` path, which has no float8 kernel (torch 2.13 CPU: "masked_fill" not
#: implemented for 'Float8_e4m3fn', tokens=1, hidden=1)
NOT_ONE_ELEMENT = "not for a one-element value"
LEVELS = (YES, NO, NOT_ONE_ELEMENT)

_BASE = {"float16": YES, "bfloat16": YES, "float32": YES, "float64": YES}


@dataclass(frozen=True)
class DtypeSupport:
    """Support per dtype name (``float8_e4m3fn``...) and where it was established."""

    levels: Mapping[str, str]
    measured: str

    def level(self, dtype: torch.dtype) -> str:
        name = str(dtype).replace("torch.", "")
        if name not in self.levels:
            raise KeyError(f"no dtype support declared for {name}")
        return self.levels[name]


def _f8(level: str) -> dict[str, str]:
    return dict(_BASE, float8_e4m3fn=level, float8_e5m2=level)


_CPU_213 = "probed on CPU, torch 2.13.0 (4-token and one-element examples, both modes)"
_CUDA_DESIGN = ("NOT MEASURED: yes for every dtype by design (the kernel copies bits as "
                "same-width integers, as triton_row_scatter's, measured there)")
_CUDA_SRC = ("probed on the H200, torch 2.11.0+cu130 (reports/probes/dev-0e03fdf/cases.log: every "
             "entry agreed but the CPU-mask put, which runs float8 one-element values on CUDA)")

#: ``(device type, variant, deterministic) -> ((since, DtypeSupport), ...)``
DTYPE_SUPPORT: dict[tuple[str, str, bool], tuple[tuple[tuple[int, int], DtypeSupport], ...]] = {}
for _det in (False, True):
    DTYPE_SUPPORT.update({
        ("cpu", "index_put_cpu_mask", _det): (((0, 0), DtypeSupport(_f8(NOT_ONE_ELEMENT), _CPU_213)),),
        ("cpu", "masked_scatter", _det): (((0, 0), DtypeSupport(_f8(NO), _CPU_213)),),
        # host rows from nonzero: an index tensor, never the masked_fill path
        ("cpu", "index_put_gpu_mask", _det): (((0, 0), DtypeSupport(_f8(YES), _CPU_213)),),
        ("cpu", "index_copy_rows", _det): (((0, 0), DtypeSupport(_f8(NO), _CPU_213)),),
        # CPU fallback: index_put_ with host rows (an index tensor, never masked_fill)
        ("cpu", "triton_row_scatter", _det): (((0, 0), DtypeSupport(_f8(YES), _CPU_213)),),
        # CUDA has no masked_fill gap for float8 (the CPU's one-element path does not exist there)
        ("cuda", "index_put_cpu_mask", _det): (((0, 0), DtypeSupport(_f8(YES), _CUDA_SRC)),),
        ("cuda", "masked_scatter", _det): (((0, 0), DtypeSupport(_f8(NO), _CUDA_SRC)),),
        ("cuda", "index_put_gpu_mask", _det): (((0, 0), DtypeSupport(_f8(YES), _CUDA_SRC)),),
        # deterministic index_copy_ goes through index_put_ (which has float8 kernels)
        ("cuda", "index_copy_rows", _det): (((0, 0), DtypeSupport(_f8(YES if _det else NO), _CUDA_SRC)),),
        # the Triton kernel copies bits as same-width integers: every dtype
        ("cuda", "triton_row_scatter", _det): (((0, 0), DtypeSupport(_f8(YES), _CUDA_SRC)),),
        # CPU fallback: the row map, then a bit copy through same-width integer views
        ("cpu", "triton_device_rows", _det): (((0, 0), DtypeSupport(_f8(YES), _CPU_213)),),
        ("cuda", "triton_device_rows", _det): (((0, 0), DtypeSupport(_f8(YES), _CUDA_DESIGN)),),
    })


def declared_dtype_support(variant: str, device: Any, torch_version: Any = None, *,
                           deterministic: bool = False) -> DtypeSupport:
    """The declared dtype support of ``variant`` on ``device`` (its type), for that torch."""
    _check_variant(variant)
    dev = torch.device(device).type
    key = (dev, variant, bool(deterministic))
    if key not in DTYPE_SUPPORT:
        raise ValueError(f"no dtype support declared for {variant} on {dev}")
    support = _in_force(DTYPE_SUPPORT[key], torch_version)
    if support is None:
        raise ValueError(f"no dtype support declared for {variant} on {dev}, torch {torch_version}")
    return support
