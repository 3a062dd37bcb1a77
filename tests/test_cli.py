"""`syncguard report`: exit codes, bad input, baseline files; over the checked-in fixture reports
(recorded shapes of H200 runs; no GPU is used here)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from syncguard import cli
from syncguard.events import SyncEvent

FIXTURES = Path(__file__).parent / "fixtures" / "reports"
ROOT = Path(__file__).parent.parent
DECL = "cases/test_merge.py::test_declared_sync[index_put_cpu_mask]"
NOSYNC = "cases/test_merge.py::test_no_sync[index_put_cpu_mask]"
SYNC = SyncEvent(api="cudaStreamSynchronize", kind="stream_sync", op="aten::nonzero",
                 filename="cases/test_merge.py", lineno=41).to_dict()


@pytest.fixture
def reports(tmp_path) -> Path:
    """A copy of the fixture reports, free to change."""
    folder = tmp_path / "reports"
    shutil.copytree(FIXTURES, folder)
    return folder


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def save(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def entry(doc: dict, nodeid: str) -> dict:
    return next(t for t in doc["tests"] if t["nodeid"] == nodeid)


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_markdown_to_stdout_exit_0(reports, capsys):
    assert cli.main(["report", str(reports / "*.json"), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("## syncguard\n") and "### Changes between versions" in out
    assert f"| `{NOSYNC}` | failed + 1 sync (stream_sync) | clean | not audited (no CUDA) |" in out


def test_table_goes_through_rich_and_keeps_brackets(reports, tmp_path, capsys):
    out = tmp_path / "out.txt"
    assert cli.main(["report", str(reports / "*.json"), "--output", str(out)]) == 0
    assert capsys.readouterr().out == ""
    text = out.read_text()
    assert "┃ case" in text and "\x1b[" not in text
    assert "test_no_sync[index_put_cpu_mask]" in text.replace("│\n│", "")  # not eaten as rich markup


@pytest.mark.parametrize("names, expected", [
    (["cuda-torch-2.8.0.json", "cuda-torch-2.11.0.json", "cpu-torch-2.13.0.json"], 1),  # 2.8.0 syncs
    (["cuda-torch-2.11.0.json", "cpu-torch-2.13.0.json"], 0),  # only allowed syncs
])
def test_fail_on_any(reports, names, expected):
    args = ["report", *(str(reports / n) for n in names), "--format", "json"]
    assert cli.main(args + ["--fail-on", "any"]) == expected
    assert cli.main(args + ["--fail-on", "never"]) == 0


def test_regression_against_baseline_exits_1(reports, tmp_path, capsys):
    base = tmp_path / "baseline.json"
    assert cli.main(["report", str(reports / "*.json"), "--baseline", str(base), "--update-baseline",
                     "--format", "json"]) == 0
    doc = load(reports / "cuda-torch-2.11.0.json")
    entry(doc, DECL).update(audit="syncs", syncs=[SYNC])
    save(reports / "cuda-torch-2.11.0.json", doc)
    capsys.readouterr()
    assert cli.main(["report", str(reports / "*.json"), "--baseline", str(base), "--fail-on",
                     "regression", "--format", "markdown"]) == 1
    out = capsys.readouterr().out
    assert "**Regressions**" in out
    assert f"- {DECL} on torch 2.11.0+cu130 · NVIDIA H200: clean -> 1 sync (cudaStreamSynchronize " \
           "via aten::nonzero at test_merge.py:41) (syncs 0 -> 1; new kind stream_sync)" in out


def test_improvement_is_reported_and_exits_0(reports, tmp_path, capsys):
    base = tmp_path / "baseline.json"
    assert cli.main(["report", str(reports / "cuda-torch-2.8.0.json"), "--baseline", str(base),
                     "--update-baseline", "--format", "json"]) == 0
    doc = load(reports / "cuda-torch-2.8.0.json")
    entry(doc, NOSYNC).update(outcome="passed", audit="clean", syncs=[])
    save(reports / "cuda-torch-2.8.0.json", doc)
    capsys.readouterr()
    assert cli.main(["report", str(reports / "*.json"), "--baseline", str(base), "--fail-on",
                     "regression", "--format", "json"]) == 0
    cmp = json.loads(capsys.readouterr().out)["baseline"]
    assert cmp["regressions"] == []
    assert [d["nodeid"] for d in cmp["improvements"]] == [NOSYNC]
    assert cmp["new_runs"] == ["torch 2.11.0+cu130 · NVIDIA H200", "torch 2.13.0+cpu · cpu"]


def test_update_baseline_writes_atomically_and_keeps_other_runs(reports, tmp_path, monkeypatch, capsys):
    base = tmp_path / "baseline.json"
    argv = ["report", str(reports / "cuda-torch-2.8.0.json"), "--baseline", str(base),
            "--update-baseline", "--format", "json", "--output", str(tmp_path / "m.json")]
    assert cli.main(argv) == 0
    first = base.read_text()
    assert load(base)["kind"] == "syncguard-baseline"
    assert cli.main(argv[:1] + [str(reports / "cuda-torch-2.11.0.json")] + argv[2:]) == 0
    assert sorted(load(base)["runs"]) == ["torch 2.11.0+cu130 · NVIDIA H200",
                                          "torch 2.8.0+cu128 · NVIDIA H200"]
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    # A write that fails half-way leaves the old baseline whole (temp file + rename).
    before = base.read_text()
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left")))
    assert cli.main(argv[:-2]) == 2  # no --output: the baseline is the one file written
    assert f"{base}: cannot write (No space left)" in error_line(capsys)
    assert base.read_text() == before != first
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_baseline_next_to_the_reports_is_not_read_as_a_report(reports, capsys):
    base = reports / "baseline.json"
    args = ["report", str(reports / "*.json"), "--baseline", str(base), "--format", "json"]
    assert cli.main(args + ["--update-baseline"]) == 0
    capsys.readouterr()
    assert cli.main(args + ["--fail-on", "regression"]) == 0
    assert len(json.loads(capsys.readouterr().out)["runs"]) == 3
    # Without --baseline it is just a JSON file that is not a session report.
    assert cli.main(["report", str(reports / "*.json")]) == 2
    assert "baseline.json: kind is 'syncguard-baseline', not 'syncguard-session'" in error_line(capsys)


def truncated(reports: Path) -> None:
    path = reports / "cuda-torch-2.11.0.json"
    path.write_text(path.read_text()[:500])


def unknown_schema(reports: Path) -> None:
    path = reports / "cuda-torch-2.11.0.json"
    save(path, {**load(path), "schema_version": 99})


def duplicate_run(reports: Path) -> None:
    shutil.copy(reports / "cuda-torch-2.11.0.json", reports / "cuda-torch-2.11.0-again.json")


@pytest.mark.parametrize("break_input, extra, message", [
    (truncated, [], "cuda-torch-2.11.0.json: not valid JSON (truncated?)"),
    (unknown_schema, [], "cuda-torch-2.11.0.json: session report has schema_version 99"),
    (duplicate_run, [], "are both reports of run 'torch 2.11.0+cu130 · NVIDIA H200'"),
    (None, ["NOMATCH"], "no reports matched"),
    (None, ["--baseline", "MISSING"], "baseline not found (create it with --update-baseline)"),
    (None, ["--fail-on", "regression"], "--fail-on regression needs --baseline"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(reports, tmp_path, capsys, break_input,
                                                         extra, message):
    if break_input:
        break_input(reports)
    base, out = tmp_path / "baseline.json", tmp_path / "README.md"
    patterns = [str(reports / ("nothing-*.json" if extra == ["NOMATCH"] else "*.json"))]
    extra = [] if extra == ["NOMATCH"] else extra
    extra = [str(tmp_path / x) if x == "MISSING" else x for x in extra]
    argv = ["report", *patterns, "--output", str(out), "--format", "markdown", *extra]
    assert cli.main(argv) == 2
    assert message in error_line(capsys)
    assert not out.exists() and not base.exists()
    if break_input or not extra:  # bad report files: with --update-baseline too, nothing is written
        assert cli.main(argv + ["--baseline", str(base), "--update-baseline"]) == 2
        assert not out.exists() and not base.exists()
        error_line(capsys)


def test_bad_baseline_is_exit_2(reports, tmp_path, capsys):
    base = tmp_path / "baseline.json"
    base.write_text('{"schema_version": 1, "kind": "syncguard-baseline", "runs": {')
    assert cli.main(["report", str(reports / "*.json"), "--baseline", str(base)]) == 2
    assert "baseline.json: not valid JSON (truncated?)" in error_line(capsys)


def test_usage_error_returns_2(capsys):
    assert cli.main(["report", "x.json", "--format", "html"]) == 2
    assert "invalid choice: 'html'" in capsys.readouterr().err


def test_python_m_syncguard_report(reports):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "syncguard", "report", *args], cwd=reports,
                              capture_output=True, text=True, env=env, timeout=60)

    ok = run("*.json", "--format", "json", "--fail-on", "any")  # literal pattern: no shell here
    assert ok.returncode == 1, ok.stderr
    runs = json.loads(ok.stdout)["runs"]
    assert [r["torch"] for r in runs] == ["2.8.0+cu128", "2.11.0+cu130", "2.13.0+cpu"]
    bad = run("nothing-*.json")
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr == "syncguard: error: no reports matched 'nothing-*.json'\n"


def test_help_is_plain_text_and_names_every_default(capsys):
    assert cli.main(["--help"]) == 0
    top = capsys.readouterr().out
    assert cli.main(["report", "--help"]) == 0
    sub = capsys.readouterr().out
    assert "``" not in top + sub and "syncguard report: the run matrix" in top
    import argparse
    parser = cli._parser()
    report = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["report"]
    for action in report._actions:
        if action.option_strings and action.dest != "help":
            assert "(default: " in action.help, action.option_strings
    flat = " ".join(sub.split())
    assert "(default: never)" in flat and "(default: table)" in flat


def test_format_choices_come_from_formats(capsys):
    from syncguard.formats import FORMATS
    assert cli.main(["report", "x.json", "--format", "yaml"]) == 2
    err = capsys.readouterr().err
    assert all(repr(name) in err for name in FORMATS)


def test_table_without_a_tty_never_wraps_a_node_id(reports, capsys):
    """stdout here is captured (no TTY), as in a CI log: the table is as wide as its rows."""
    long_id = "cases/test_merge.py::test_no_sync[" + "a_rather_long_parameter_id_" * 6 + "]"
    doc = load(reports / "cuda-torch-2.11.0.json")
    entry(doc, NOSYNC)["nodeid"] = long_id
    save(reports / "cuda-torch-2.11.0.json", doc)
    assert cli.main(["report", str(reports / "*.json")]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" not in out
    assert any(long_id in line for line in out.splitlines())
    assert any(NOSYNC in line for line in out.splitlines())


def test_recorded_values_show_in_table_and_markdown(reports, capsys):
    doc = load(reports / "cuda-torch-2.11.0.json")
    entry(doc, NOSYNC)["measurements"] = {"tokens_per_s": 1234.5, "variant": "cpu_mask",
                                          "median_ms": 2.5}
    save(reports / "cuda-torch-2.11.0.json", doc)
    assert cli.main(["report", str(reports / "cuda-torch-2.11.0.json"), "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "also recorded" in md
    row = next(line for line in md.splitlines() if line.startswith(f"| `{NOSYNC}` | torch"))
    assert "2.50 ms" in row and "tokens_per_s=1234.5, variant=cpu_mask" in row
    assert cli.main(["report", str(reports / "cuda-torch-2.11.0.json")]) == 0
    table = capsys.readouterr().out
    assert "tokens_per_s=1234.5, variant=cpu_mask" in table
