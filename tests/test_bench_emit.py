"""bench.emit_doc and bench.probe_main: a probe's JSON and markdown, each written whole or not at
all, and its command line (CPU)."""
import json
import os

import pytest

from bench import emit_doc, probe_main


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


def test_a_probe_runs_with_its_size_or_renders_a_committed_run(tmp_path, capsys):
    sizes = []

    def run(n):
        sizes.append(n)
        return {"torch": "2.8.0+cu128", "n": n}

    def render(doc):
        return [f"# n={doc['n']}"]

    assert probe_main(["--pairs", "3", "--out", str(tmp_path / "a")], run, render, "p", "--pairs", 12) == 0
    assert sizes == [3] and (tmp_path / "a" / "p-2.8.0.md").read_text() == "# n=3\n"
    probe_main(["--render", str(tmp_path / "a" / "p-2.8.0.json"), "--out", str(tmp_path / "b")],
               run, render, "p", "--pairs", 12)
    assert sizes == [3]  # rendering times nothing
    assert (tmp_path / "b" / "p-2.8.0.md").read_text() == "# n=3\n"
    assert (tmp_path / "b" / "p-2.8.0.json").read_text() == (tmp_path / "a" / "p-2.8.0.json").read_text()
    probe_main(["--out", str(tmp_path / "c")], run, render, "p", "--pairs", 12)
    assert sizes == [3, 12]
