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
from syncguard.records.events import SyncError
from syncguard.predict import predicting
from rulelearn.calibrate import calibrate_cases
from rulelearn.derive import measured_kinds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Session reports of cases/ compared with: their declared syncs are syncguard's debug+trace+
# profile detectors' (a second reference beside the corpus runs' ground truth); a run kept under
# reports/gpu/<version>/ is read where the matrix has none for that version.
VERSIONS = ("2.8.0", "2.9.1", "2.11.0", "2.13.0", "2.14.1")


def measured(snippet: str, version: str = "2.14.1") -> list[str]:
    """Kinds the committed H200 run's ground truth measured for a corpus snippet."""
    return measured_kinds(ROOT, version, f"corpus/{snippet}")


def _session_report(version: str) -> str:
    """The H200 run of cases/ for ``version``: the matrix's own, or an older one kept under
    reports/gpu/<version>/ (runs of older detector code, kept as measurements of torch)."""
    for folder in (("reports",), ("reports", "gpu", version)):
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
    assert [r.name for r in cal.rows if not r.runnable_on_cpu] == ["triton_row_scatter",
                                                                     "triton_device_rows"]


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


# ---------------------------------------------------------------------------------------------
# The mutation against CPU CI's own command (.ci/run: cases/ under prediction, fail mode)

CI_ARGS = ["--syncguard", "--syncguard-predict", "--syncguard-mode=fail"]
CI_MUTANTS = {
    "item_and_mask_on_the_device": '    if int(is_multimodal.to(inputs_embeds.device).sum()'
                                   '.item()) < 0:  # MUTANT\n        raise ValueError(name)\n',
    "item_only": "    if inputs_embeds.sum().item() is None:  # MUTANT\n        raise ValueError(name)\n",
}


def _ci_run(tree, node: str):
    """CPU CI's cases/ command on ``tree``'s copy of cases/ (syncguard from this checkout)."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), ROOT]), "CI": "true"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly", node, *CI_ARGS], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=300)


def _copy_cases(tree):
    import shutil

    shutil.copytree(os.path.join(ROOT, "cases"), tree / "cases",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tree / "pyproject.toml")


CI_NODE = "cases/test_merge.py::test_declared_sync[index_copy_rows-default]"


@pytest.fixture(scope="module")
def unmutated_passes_cpu_ci(tmp_path_factory):
    tree = tmp_path_factory.mktemp("base")
    _copy_cases(tree)
    base = _ci_run(tree, CI_NODE)
    assert base.returncode == 0, base.stdout[-3000:]


@pytest.mark.parametrize("mutant", CI_MUTANTS)
def test_cpu_ci_fails_when_a_merge_variant_is_made_to_sync(mutant, tmp_path,
                                                            unmutated_passes_cpu_ci):
    """issue 17's experiment: ``index_copy_rows`` (sync-free on the H200) changed to call
    ``.item()`` (and to move its mask to the device). CPU CI's cases/ step, unchanged, passes on
    the unmutated copy (the fixture) and fails on the mutant, naming the predicted sync at the
    mutant's line. cases/ is copied; the checkout's own files are never edited."""
    _copy_cases(tmp_path)
    path = tmp_path / "cases" / "merge.py"
    text = path.read_text()
    anchor = '    name = "index_copy_rows"\n'
    assert text.count(anchor) == 1
    path.write_text(text.replace(anchor, anchor + CI_MUTANTS[mutant]))
    line = text[:text.index(anchor)].count("\n") + 2  # the mutant's first line
    out = _ci_run(tmp_path, CI_NODE)
    assert out.returncode == 1, out.stdout[-3000:]
    assert f"merge.py:{line}" in out.stdout and "blocking_copy_d2h" in out.stdout, \
        out.stdout[-3000:]
    assert "seen by predict" in out.stdout


def test_a_session_report_claiming_a_billion_syncs_is_refused_before_it_is_expanded(tmp_path):
    """calibrate_cases lists one measured sync per count: a report claiming 10**9 at one site
    had it build a list of a billion pairs; now it is read as any report is, and refused."""
    import json

    from syncguard.records.schema import SchemaError

    with open(_session_report("2.11.0"), encoding="utf-8") as f:
        doc = json.load(f)
    rec = next(r for t in doc["tests"] if "test_declared_sync[" in t["nodeid"]
               for r in t["allowed"] if (r.get("reason") or "").startswith("declared:")
               and (r.get("filename") or "").endswith("merge.py"))
    rec.update(count=10**9, phases={"run": 10**9})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(SchemaError, match=r"bad\.json: .*count 1000000000 takes the report to"):
        calibrate_cases(str(bad), ROOT, "2.11.0")


def test_calibrate_cases_reads_the_session_report_once(monkeypatch):
    """Why: it read and parsed the report three times (checked by load_document, then parsed
    again for the tests, and again for the provenance the line mapping needs), where the
    checked document has all of it."""
    import builtins

    from syncguard.reporting import sessionfile

    path = _session_report("2.11.0")
    reads = []
    read_json, open_ = sessionfile.read_json, builtins.open

    def counting_read_json(p, *a, **kw):
        reads.append(("read_json", os.fspath(p)))
        return read_json(p, *a, **kw)

    def counting_open(p, *a, **kw):
        reads.append(("open", os.fspath(p) if isinstance(p, (str, os.PathLike)) else p))
        return open_(p, *a, **kw)

    monkeypatch.setattr(sessionfile, "read_json", counting_read_json)
    monkeypatch.setattr(builtins, "open", counting_open)
    calibrate_cases(path, ROOT, "2.11.0")
    monkeypatch.undo()
    assert [r for r in reads if r[1] == path] == [("read_json", path)]
