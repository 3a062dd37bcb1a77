"""The merge variants of cases/ under prediction, and the mutation of issue 17: a variant
changed to move its mask to the device, or to call ``.item()``, must now be predicted to sync
(and fail a gate), on a CPU. cases/ files are never edited: mutants are copies compiled from
the variant's source into a temporary module. Expected kinds come from the committed H200
runs."""
from __future__ import annotations

import inspect
import os

import pytest

from cases import merge
from syncguard.events import SyncError
from syncguard.predict import predicting
from syncguard.predict.calibrate import calibrate_cases
from syncguard.predict.derive import measured_kinds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VERSIONS = ("2.8.0", "2.11.0", "2.14.1")


def measured(snippet: str, version: str = "2.14.1") -> list[str]:
    """Kinds the committed H200 run's ground truth measured for a corpus snippet."""
    return measured_kinds(ROOT, version, f"corpus/{snippet}")


def _session_report(version: str) -> str:
    """The H200 run of cases/ for ``version``: the matrix's own, or an archived one (runs of
    older detector code, kept as measurements of torch: reports/archive/README.md)."""
    for folder in (("reports",), ("reports", "archive")):
        path = os.path.join(ROOT, *folder, f"cuda-torch-{version}.json")
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"no H200 session report of cases/ for torch {version}")


@pytest.mark.parametrize("version", VERSIONS)
def test_variants_are_predicted_as_the_gpu_runs_measured_them(version):
    """Out-of-sample: no rule was derived from cases/."""
    cal = calibrate_cases(_session_report(version), ROOT, version)
    runnable = [r for r in cal.rows if r.runnable_on_cpu]
    assert len(runnable) >= 4
    bad = [f"{r.name}: {r.disagreement()}" for r in runnable
           if not (r.whether_ok and r.kind_ok and r.line_ok is not False)]
    assert not bad, "\n".join(bad)
    assert [r.name for r in cal.rows if not r.runnable_on_cpu] == ["triton_row_scatter"]


def _mutant(fn, anchor: str, inserted: list[str], tmp_path):
    """``fn`` recompiled from its source with ``inserted`` lines after the line containing
    ``anchor``, in a file of its own; returns (function, first inserted line number)."""
    lines = inspect.getsource(fn).splitlines()
    at = next(i for i, text in enumerate(lines) if anchor in text)
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    lines[at + 1:at + 1] = [indent + text for text in inserted]
    path = tmp_path / f"mutant_{fn.__name__}.py"
    path.write_text("\n".join(lines) + "\n")
    scope = dict(vars(merge))
    exec(compile(path.read_text(), str(path), "exec"), scope)
    return scope[fn.__name__], at + 2, str(path)


def _inputs(name):
    return merge.representative_inputs(name, 64, 16)


MUTATIONS = {
    "mask_moved_to_the_device": (
        merge.merge_index_put_cpu_mask, "_check_count(name, _count_slots",
        ["is_multimodal = is_multimodal.to(inputs_embeds.device)"],
        # the move itself, then index_put_ with a device mask (its nonzero waits)
        [(0, k) for k in measured("to_cuda_pageable_blocking")]
        + [(1, k) for k in measured("assign_with_cuda_mask")]),
    "item_of_a_device_count": (
        merge.merge_index_copy_rows, "mm = flatten_embeddings",
        ["n = is_multimodal.to(inputs_embeds.device).sum().item()"],
        [(0, k) for k in measured("to_cuda_pageable_blocking") + measured("item")]),
}


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_a_mutated_variant_is_predicted_to_sync_and_fails_the_gate(mutation, tmp_path):
    fn, anchor, inserted, expected = MUTATIONS[mutation]
    name = fn.__name__.removeprefix("merge_")
    with predicting() as original:
        fn(*_inputs(name))
    original.raise_if_syncs()  # the committed variant is sync-free on torch >= 2.9
    mutant, first, path = _mutant(fn, anchor, inserted, tmp_path)
    with predicting() as p:
        x, mask, mm = _inputs(name)
        assert mutant(x, mask, mm) is x
    got = sorted((e.lineno - first, e.kind) for e in p.syncs if e.filename == path)
    assert got == sorted(expected), p.format()
    assert all(e.detectors == ("predict",) for e in p.syncs)
    with pytest.raises(SyncError):
        p.raise_if_syncs()
