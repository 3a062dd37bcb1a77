"""`syncguard report` leads with what matters: one run opens with its summary and the tests with
syncs, the clean and skipped ones only counted unless --all; a matrix leads with the cases that
differ between versions.

The session report here is written by hand in the shape of tests/fixtures/reports/ (schema 4, as
reporting/sessionfile.py documents it), after a real suite's: Liger-Kernel's test/transformers,
291 tests, two of them with a cudaDeviceSynchronize at liger_kernel/ops/fused_moe.py:210, 72 per
test. Every expected line is typed from the terminal summary's format as a user reads it; none
is computed by the code under test. No GPU is used.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from syncguard import cli

FIXTURES = Path(__file__).parent / "fixtures" / "reports"
MOE = "test/transformers/test_fused_moe.py::test_fused_moe"
SYNCING = [f"{MOE}[bf16]", f"{MOE}[fp32]"]
# names sorting before and after the two that sync, so that node id order would bury them
CLEAN = [f"test/transformers/test_{name}_{i:03d}.py::test_correctness"
         for name, n in (("attention", 130), ("rope", 120)) for i in range(n)]
SKIPPED = [f"test/transformers/test_a_skipped_{i:02d}.py::test_needs_two_gpus" for i in range(39)]
ALL = SYNCING + CLEAN + SKIPPED
ROW_TEXT = "failed + 72 syncs (device_sync)"  # mode=fail: a test that syncs fails


def _test(nodeid: str) -> dict:
    entry = {"nodeid": nodeid, "outcome": "passed", "audit": "clean", "reason": None,
             "syncs": [], "allowed": [], "races": [], "duration_s": 0.5, "examples": None,
             "measurements": {}, "worker": None, "device": "cuda:0", "outside": [],
             "events": [], "detectors": ["cuda"]}
    if nodeid in SKIPPED:
        entry.update(outcome="skipped", audit="off", reason="skipped: needs 2 GPUs",
                     device=None, detectors=None)
    if nodeid in SYNCING:
        entry.update(outcome="failed", audit="syncs", syncs=[{
            "kind": "device_sync", "api": "cudaDeviceSynchronize", "op": None, "ops": [],
            "filename": "liger_kernel/ops/fused_moe.py", "lineno": 210,
            "function": "fused_moe_forward", "count": 72, "blocked_us_total": 900.0,
            "blocked_us_max": 20.0, "phases": {"run": 72}, "stack": [],
            "user_frame": f"{MOE.split('::')[0]}:40 in test_fused_moe", "entry_frame": None,
            "thread": "MainThread", "detectors": ["cuda"], "reason": None, "note": None}])
    return entry


def _session(torch: str = "2.11.0+cu130", tests: list[dict] | None = None) -> dict:
    """A session report of the 291 tests (header fields as the fixture reports hold them)."""
    doc = json.loads((FIXTURES / "cuda-torch-2.11.0.json").read_text())
    tests = tests if tests is not None else [_test(n) for n in ALL]
    doc.update(schema_version=4, frames=[], tests=tests)
    doc["environment"]["torch"] = doc["provenance"]["torch"] = torch
    doc["summary"] = {"tests": 291, "audited": 252, "clean": 250, "with_syncs": 2, "allowed": 0,
                      "not_audited": 0, "syncs": 144, "outside_scope": 0}
    return doc


@pytest.fixture
def liger(tmp_path) -> Path:
    path = tmp_path / "liger.json"
    path.write_text(json.dumps(_session()))
    return path


def _report(capsys, *argv: str) -> tuple[int, str]:
    rc = cli.main(["report", *argv])
    return rc, capsys.readouterr().out


SUMMARY = ["252 test(s) audited: 250 clean, 2 with syncs, 0 allowed only; 0 not audited (no "
           "CUDA); 39 not audited (off/not run)",
           "top sync sites:",
           "   144x  liger_kernel/ops/fused_moe.py:210  device_sync cudaDeviceSynchronize  "
           "(2 test(s))"]
HIDDEN = "289 cases not shown (250 clean, 39 skipped); --all lists every case"


def _table_rows(text: str) -> list[tuple[str, str]]:
    """(case, cell) of each body row of the text table's first (the matrix) table."""
    rows = []
    for line in text.splitlines():
        cols = [c.strip() for c in line.strip("│").split("│")] if line.startswith("│") else []
        if len(cols) == 2 and "::" in cols[0]:
            rows.append((cols[0], cols[1]))
    return rows


def test_one_run_opens_with_the_summary_and_shows_only_the_tests_that_sync(liger, capsys):
    rc, out = _report(capsys, str(liger))
    assert rc == 0
    lines = out.splitlines()
    at = [lines.index(line) for line in SUMMARY]
    assert at == sorted(at) and at[0] < min(i for i, x in enumerate(lines) if "┃ case" in x)
    assert _table_rows(out) == [(n, ROW_TEXT) for n in SYNCING]
    assert HIDDEN in lines


def test_one_run_with_all_lists_every_test_those_that_sync_first(liger, capsys):
    rc, out = _report(capsys, str(liger), "--all")
    assert rc == 0
    rows = _table_rows(out)
    assert sorted(n for n, _ in rows) == sorted(ALL) and len(rows) == 291
    assert rows[:2] == [(n, ROW_TEXT) for n in SYNCING]
    assert {cell for _, cell in rows[2:]} == {"clean", "skipped"}
    assert SUMMARY[2] in out.splitlines() and "not shown" not in out


def _markdown_rows(out: str) -> list[tuple[str, str]]:
    """(case, cells) of each body row of the markdown's first table (the matrix; the
    measurements table further down has rows of cases too)."""
    lines = out.splitlines()
    start = next((i for i, x in enumerate(lines) if x.startswith("| case |")), len(lines))
    rows = []
    for line in lines[start + 2:]:
        m = re.fullmatch(r"\| `(.+?)` \| (.+) \|", line)
        if not m:
            break
        rows.append((m.group(1).replace("\\|", "|"), m.group(2)))
    return rows


def test_markdown_opens_with_the_summary_and_the_tests_that_sync(liger, capsys):
    rc, out = _report(capsys, str(liger), "--format", "markdown")
    assert rc == 0
    lines = out.splitlines()
    fence = lines.index("```text")
    assert lines[fence + 1:fence + 4] == SUMMARY and lines[fence + 4] == "```"
    header = lines.index("| case | torch 2.11.0+cu130 · NVIDIA H200 |")
    assert fence < header
    assert _markdown_rows(out) == [(n, ROW_TEXT) for n in SYNCING]
    assert lines[header + 2:header + 6] == [f"| `{SYNCING[0]}` | {ROW_TEXT} |",
                                            f"| `{SYNCING[1]}` | {ROW_TEXT} |", "", HIDDEN]


def test_markdown_with_all_lists_every_test_those_that_sync_first(liger, capsys):
    rc, out = _report(capsys, str(liger), "--format", "markdown", "--all")
    assert rc == 0
    rows = _markdown_rows(out)
    assert len(rows) == 291 and sorted(n for n, _ in rows) == sorted(ALL)
    assert rows[:2] == [(n, ROW_TEXT) for n in SYNCING]
    assert "not shown" not in out


def test_json_lists_every_test_with_or_without_all(liger, capsys):
    for extra in ([], ["--all"]):
        rc, out = _report(capsys, str(liger), "--format", "json", *extra)
        assert rc == 0
        cases = json.loads(out)["cases"]
        assert [c["nodeid"] for c in cases] == sorted(ALL)


@pytest.mark.parametrize("extra", [[], ["--all"]])
def test_the_gate_is_the_same_whatever_is_shown(liger, capsys, extra):
    assert cli.main(["report", str(liger), "--fail-on", "any", *extra]) == 1
    assert cli.main(["report", str(liger), "--fail-on", "never", *extra]) == 0


def test_a_cpu_run_says_first_that_nothing_was_audited(capsys):
    rc, out = _report(capsys, str(FIXTURES / "cpu-torch-2.13.0.json"), "--format", "markdown")
    assert rc == 0
    lines = out.splitlines()
    assert lines[lines.index("```text") + 1] == "NO TEST WAS AUDITED: 6 not audited (no CUDA)"
    assert "6 cases not shown (5 not audited, 1 skipped); --all lists every case" in lines
    assert not _markdown_rows(out)


def test_a_matrix_leads_with_the_cases_that_differ_between_versions(tmp_path, capsys):
    """Two versions of one GPU: the fused_moe tests stop syncing on the newer one. They sort
    after the attention tests; they come first, before any case that stayed the same."""
    old = tmp_path / "old.json"
    old.write_text(json.dumps(_session("2.10.0+cu130")))
    new = tmp_path / "new.json"
    new.write_text(json.dumps(_session("2.11.0+cu130", [
        _test(n) if n not in SYNCING else {**_test(n), "outcome": "passed", "audit": "clean",
                                           "syncs": []}
        for n in ALL])))
    rc, out = _report(capsys, str(old), str(new), "--format", "markdown")
    assert rc == 0
    rows = _markdown_rows(out)
    assert rows == [(n, f"{ROW_TEXT} | clean") for n in SYNCING]
    assert "289 cases not shown (250 clean, 39 skipped); --all lists every case" in out
    assert "```text" not in out  # several runs: no one run's summary
    rc, out = _report(capsys, str(old), str(new), "--format", "markdown", "--all")
    rows = _markdown_rows(out)
    assert len(rows) == 291 and rows[:2] == [(n, f"{ROW_TEXT} | clean") for n in SYNCING]
    assert {cells for _, cells in rows[2:]} == {"clean | clean", "skipped | skipped"}


def test_the_fixture_matrix_shows_changed_cases_then_syncing_ones_and_counts_the_rest(capsys):
    """Over the three fixture reports: the three cases that change between 2.8.0 and 2.11.0,
    then the two with allowed syncs on both; the one clean (and skipped on the CPU) is counted."""
    rc, out = _report(capsys, str(FIXTURES / "*.json"), "--format", "markdown")
    assert rc == 0
    assert [n for n, _ in _markdown_rows(out)] == [
        "cases/test_merge.py::test_declared_sync[index_put_cpu_mask]",
        "cases/test_merge.py::test_no_sync[index_copy_rows]",
        "cases/test_merge.py::test_no_sync[index_put_cpu_mask]",
        "cases/test_item.py::test_item_is_a_declared_sync",
        "cases/test_merge.py::test_declared_sync[index_put_cuda_mask]"]
    assert "1 case not shown (1 clean / skipped); --all lists every case" in out.splitlines()


def test_a_regression_against_the_baseline_leads_and_the_gate_is_unchanged(liger, tmp_path,
                                                                           capsys):
    """A clean test that starts syncing: the baseline names it, so its row comes before the
    fused_moe ones that synced in the baseline too; --fail-on regression still exits 1."""
    base = tmp_path / "baseline.json"
    assert cli.main(["report", str(liger), "--baseline", str(base), "--update-baseline",
                     "--format", "json"]) == 0
    doc = json.loads(liger.read_text())
    worse = CLEAN[-1]
    moved = next(t for t in doc["tests"] if t["nodeid"] == worse)
    moved.update(audit="syncs", syncs=_test(SYNCING[0])["syncs"])
    liger.write_text(json.dumps(doc))
    capsys.readouterr()
    rc, out = _report(capsys, str(liger), "--baseline", str(base), "--fail-on", "regression",
                      "--format", "markdown")
    assert rc == 1
    assert [n for n, _ in _markdown_rows(out)] == [worse] + SYNCING
    assert "288 cases not shown (249 clean, 39 skipped); --all lists every case" in out
