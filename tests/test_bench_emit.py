"""bench.emit_doc: a probe's JSON and markdown, each written whole or not at all (CPU)."""
import json
import os

import pytest

from bench import emit_doc


def test_a_probe_result_is_written_as_json_and_markdown(tmp_path, capsys):
    doc = {"kind": "x", "rows": {"a": 1.5}}
    emit_doc(doc, ["# t", "", "| a |"], str(tmp_path / "sub"), "x-2.11.0")
    assert json.loads((tmp_path / "sub" / "x-2.11.0.json").read_text()) == doc
    assert (tmp_path / "sub" / "x-2.11.0.md").read_text() == "# t\n\n| a |\n"
    assert "| a |" in capsys.readouterr().out


def test_a_result_that_cannot_be_written_leaves_no_file_behind(tmp_path):
    with pytest.raises(TypeError):
        emit_doc({"rows": object()}, ["# t"], str(tmp_path), "bad")
    assert os.listdir(tmp_path) == []
