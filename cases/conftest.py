"""cases/ under sync prediction: the tests whose assertions only a GPU can make are skipped there,
each with its reason; measured on a GPU (or with ``--syncguard-predict=off``) they run as written.

Why here and not a deselect list in CI: on a machine without CUDA ``pytest --syncguard`` predicts
by default (README command 1), and these tests would fail there for what the CPU stand-ins cannot
be (CUDA's sanitizer, GPU kernels' NaN payloads, a device-side assert, GPU timing, float8 kernels
the CPU build lacks), not for a sync. Prediction is read from syncguard's own state, never by
importing it: a run without syncguard loads nothing of it.
"""
from __future__ import annotations

import sys

import pytest

#: node id (without parameters) or file -> why only a GPU can run it
GPU_ONLY = {
    "cases/test_races.py": "race detection needs CUDA's sanitizer",
    "cases/test_merge.py::test_deterministic_kernels_canonicalise_nan": "GPU kernels' NaN payloads",
    "cases/test_merge.py::test_masked_scatter_too_few_rows_asserts_on_device_in_a_subprocess":
        "a device-side assert in a CUDA child process",
    "cases/test_merge.py::test_merge_measurements": "GPU timing (Event.elapsed_time)",
    "cases/test_merge.py::test_merge_properties":
        "the CPU build's kernels lack the float8 masked_fill/one-element puts CUDA's have",
    "cases/test_merge.py::test_declared_dtype_support_matches_the_build":
        "the CPU build's kernels lack the float8 masked_fill/one-element puts CUDA's have",
}


def predicting() -> bool:
    """Whether this run predicts (syncguard's session block is open), without importing it."""
    predict = sys.modules.get("syncguard.predict")
    return predict is not None and predict.session_active()


def pytest_collection_modifyitems(config, items):
    if not predicting():
        return
    for item in items:
        path = item.nodeid.split("::")[0]
        why = GPU_ONLY.get(item.nodeid.split("[")[0]) or GPU_ONLY.get(path)
        if why:
            item.add_marker(pytest.mark.skip(reason=f"GPU-only assertion, not predicted: {why}"))
