"""The atlas's input format (syncguard.atlas.runs), checked against the committed corpus runs
that GPU machines wrote (reports/atlas-runs/): the expected bytes and fields come from those
files, not from the code under test."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from syncguard.atlas import runs
from syncguard.records.schema import SchemaError

RUNS = sorted((Path(__file__).resolve().parent.parent / "reports" / "atlas-runs").glob("corpus-run-*.json"))


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.name)
def test_committed_run_reads_and_writes_back_byte_for_byte(path):
    doc = runs.load_run(str(path))
    assert runs.dumps_run(doc) == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", RUNS[:1], ids=lambda p: p.name)
def test_new_run_builds_the_committed_document(path):
    doc = json.loads(path.read_text(encoding="utf-8"))
    built = runs.new_run(doc["provenance"], doc["detector_sets"], doc["noise_syncs"],
                         doc["snippets"], doc["summary"])
    assert built == doc


def test_there_are_committed_runs():
    assert len(RUNS) >= 2


@pytest.mark.parametrize("breakage, where", [
    (lambda d: d.update(snippets=None), "snippets"),
    (lambda d: d["snippets"][0].update(truth={"waits": [{"kind": "stream_sync"}]}), "api"),
    (lambda d: d.update(schema_version=1), "1"),
    (lambda d: d.update(schema="something-else"), "not a corpus run"),
])
def test_broken_documents_are_refused_with_a_reason(tmp_path, breakage, where):
    doc = json.loads(RUNS[0].read_text(encoding="utf-8"))
    breakage(doc)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(SchemaError, match=where) as e:
        runs.load_run(str(path))
    assert str(path) in str(e.value)
    with pytest.raises(SchemaError):
        runs.dumps_run(doc)
