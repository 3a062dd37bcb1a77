"""`syncguard report`: exit codes, bad input, baseline files; over the checked-in fixture reports
(recorded shapes of H200 runs; no GPU is used here)."""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from syncguard import cli
from syncguard.records.events import SyncEvent

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
           "via aten::nonzero at test_merge.py:41) (syncs 0 -> 1; new kind stream_sync; " \
           "unallowed syncs at cudaStreamSynchronize in ? (test_merge.py): 1 > baseline 0)" in out


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
    capsys.readouterr()
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


# -- robustness (issue 10) and provenance (issue 14) ---------------------------------------------

def test_binary_or_non_utf8_report_is_one_line_exit_2(reports, tmp_path, capsys):
    (reports / "cuda-torch-2.11.0.json").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00binary")
    assert cli.main(["report", str(reports / "*.json")]) == 2
    assert "cuda-torch-2.11.0.json: not a JSON text file (byte 0 is not UTF-8)" in error_line(capsys)


def test_gzipped_report_reads_as_the_plain_one_and_a_broken_one_is_one_line(reports, capsys):
    """A suite's report committed gzipped (reports/real-suite/) is read as it is."""
    import gzip

    plain = reports / "cuda-torch-2.11.0.json"
    assert cli.main(["report", str(plain), "--format", "markdown"]) == 0
    expected = capsys.readouterr().out
    packed = reports / "packed" / "cuda-torch-2.11.0.json.gz"
    packed.parent.mkdir()
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert cli.main(["report", str(packed), "--format", "markdown"]) == 0
    assert capsys.readouterr().out == expected
    packed.write_bytes(plain.read_bytes())  # named .gz, not gzip
    assert cli.main(["report", str(packed)]) == 2
    assert "cuda-torch-2.11.0.json.gz: not a gzip file" in error_line(capsys)


@pytest.mark.parametrize("which", ["report", "baseline"])
def test_output_naming_an_input_is_refused_and_overwrites_nothing(reports, tmp_path, capsys, which):
    base = tmp_path / "baseline.json"
    assert cli.main(["report", str(reports / "*.json"), "--baseline", str(base),
                     "--update-baseline", "--format", "json", "--output", str(tmp_path / "m")]) == 0
    capsys.readouterr()
    target = reports / "cuda-torch-2.11.0.json" if which == "report" else base
    before = {p: p.read_bytes() for p in [*reports.iterdir(), base]}
    # a different spelling of the same file is the same file
    spelled = target.parent / ".." / target.parent.name / target.name
    argv = ["report", str(reports / "*.json"), "--baseline", str(base), "--format", "markdown",
            "--output", str(spelled)]
    assert cli.main(argv) == 2
    what = "one of the input reports" if which == "report" else "the baseline"
    assert f"is {what}; refusing to overwrite it" in error_line(capsys)
    assert {p: p.read_bytes() for p in [*reports.iterdir(), base]} == before
    assert cli.main(argv + ["--update-baseline"]) == 2
    assert {p: p.read_bytes() for p in [*reports.iterdir(), base]} == before


def test_baseline_given_a_session_report_says_so_in_one_line(reports, capsys):
    session = reports / "cuda-torch-2.8.0.json"
    assert cli.main(["report", str(reports / "cuda-torch-2.11.0.json"), "--baseline",
                     str(session)]) == 2
    line = error_line(capsys)
    assert f"{session}: is a session report, not a baseline" in line


def test_written_files_keep_the_usual_permissions(reports, tmp_path):
    """New files get 0666 less the umask (mkstemp alone gives 0600); a replaced file keeps its
    mode; the baseline written by --update-baseline included."""
    out, base = tmp_path / "out.md", tmp_path / "baseline.json"
    old = os.umask(0o027)
    try:
        argv = ["report", str(reports / "*.json"), "--format", "markdown", "--output", str(out),
                "--baseline", str(base), "--update-baseline"]
        assert cli.main(argv) == 0
        assert (out.stat().st_mode & 0o777, base.stat().st_mode & 0o777) == (0o640, 0o640)
        out.chmod(0o604)
        base.chmod(0o644)
        assert cli.main(argv) == 0
        assert (out.stat().st_mode & 0o777, base.stat().st_mode & 0o777) == (0o604, 0o644)
    finally:
        os.umask(old)


def test_runs_from_different_detector_code_are_refused_unless_allowed(reports, capsys):
    doc = load(reports / "cuda-torch-2.11.0.json")
    doc["provenance"]["syncguard"]["code"] = "another-detector-build"
    doc["provenance"]["project"]["commit"] = "fedcba9876543210fedcba9876543210fedcba98"
    save(reports / "cuda-torch-2.11.0.json", doc)
    args = ["report", str(reports / "*.json"), "--format", "markdown"]
    assert cli.main(args) == 2
    line = error_line(capsys)
    assert "refusing to compare runs made by different detector code" in line
    assert "torch 2.11.0+cu130 · NVIDIA H200 (syncguard 0.1.0 · code another-de, commit fedcba9876)" in line
    assert "--allow-mixed-commits" in line
    assert cli.main(args + ["--allow-mixed-commits"]) == 0
    out = capsys.readouterr().out
    assert "| torch 2.11.0+cu130 · NVIDIA H200 † |" in out.replace(" | ", " |\n| ").replace("\n", " ")
    assert "| project commit | 0123456789 | fedcba9876 | 0123456789 |" in out


def test_update_baseline_shows_the_diff_it_accepts(reports, tmp_path, capsys):
    base = tmp_path / "baseline.json"
    args = ["report", str(reports / "*.json"), "--baseline", str(base), "--update-baseline",
            "--format", "json"]
    assert cli.main(args) == 0
    err = capsys.readouterr().err
    assert "--update-baseline accepted 3 change(s)" in err and "+ run torch 2.8.0+cu128" in err
    doc = load(reports / "cuda-torch-2.11.0.json")
    entry(doc, DECL).update(audit="allowed", allowed=[SYNC])
    save(reports / "cuda-torch-2.11.0.json", doc)
    assert cli.main(args) == 0
    err = capsys.readouterr().err
    assert "accepted 1 change(s)" in err
    assert f"~ {DECL} on torch 2.11.0+cu130 · NVIDIA H200: clean -> allowed 1 (stream_sync)" in err


def test_the_committed_ci_gate_passes():
    """The committed gate (README, .ci/run): the committed reports against reports/baseline.json."""
    reports = sorted(str(p) for p in (ROOT / "reports").glob("*-torch-*.json"))
    assert cli.main(["report", *reports, "--baseline", str(ROOT / "reports" / "baseline.json"),
                     "--fail-on", "regression", "--format", "json"]) == 0


def test_a_committed_run_whose_detectors_fell_back_fails_the_gate(tmp_path, capsys):
    """Why: a run whose cuda detector fell back to debug,trace saw fewer syncs and passed as an
    improvement; the baseline kept nothing of what a run could see."""
    real = ROOT / "reports" / "cuda-torch-2.11.0.json"
    base = tmp_path / "baseline.json"
    assert cli.main(["report", str(real), "--baseline", str(base), "--update-baseline",
                     "--format", "json"]) == 0
    doc = load(real)
    doc["provenance"]["detectors_ran"] = "debug,trace: cuda detector not used (no libcupti)"
    for t in doc["tests"]:  # what the fallback did not see
        if t["audit"] == "allowed":
            t.update(audit="clean", allowed=[])
    fell_back = save(tmp_path / "cuda-torch-2.11.0.json", doc)
    capsys.readouterr()
    assert cli.main(["report", str(fell_back), "--baseline", str(base), "--fail-on",
                     "regression", "--format", "markdown"]) == 1
    label = f"torch {doc['provenance']['torch']} · {doc['provenance']['gpu']}"  # the run's own
    assert (f"- (whole run) on {label}: cuda -> debug,trace "
            "(detectors cuda -> debug,trace)") in capsys.readouterr().out.splitlines()


def _without_test_detectors(doc: dict) -> dict:
    """A committed report (session schema 4) as schema 3 wrote it: no test names its detectors."""
    for t in doc["tests"]:
        t.pop("detectors", None)
    doc["schema_version"] = 3
    return doc


def test_a_committed_test_whose_detectors_fell_back_alone_fails_the_gate(tmp_path, capsys):
    """Why: one test's region fell back to debug,trace while the rest of the run kept cuda; the
    run's provenance still said cuda, so the test's clean result passed as no regression."""
    committed = ROOT / "reports" / "cuda-torch-2.11.0.json"
    doc = load(committed)
    judged = [t for t in doc["tests"] if t["audit"] in ("clean", "syncs", "allowed")]
    # the GPU run names each judged test's detectors: cuda, or what a test's marker asked for
    assert judged and all(t.get("detectors") in (["cuda"], ["debug", "trace", "profile"])
                          for t in judged)
    report, base = save(tmp_path / "cuda-torch-2.11.0.json", doc), tmp_path / "baseline.json"
    gate = ["--baseline", str(base), "--fail-on", "regression", "--format", "markdown"]
    assert cli.main(["report", str(report), "--baseline", str(base), "--update-baseline",
                     "--format", "json"]) == 0
    t = next(t for t in judged if t["audit"] == "allowed" and t["detectors"] == ["cuda"])
    t.update(audit="clean", allowed=[], detectors=["debug", "trace"],  # what it did not see
             detector_reason="debug,trace: cuda detector not used (CUPTI held elsewhere)")
    save(report, doc)
    capsys.readouterr()
    assert cli.main(["report", str(report), *gate]) == 1
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "detectors" in x
               and x.startswith("- ")]
    label = f"torch {doc['provenance']['torch']} · {doc['provenance']['gpu']}"  # the run's own
    assert line.startswith(f"- {t['nodeid']} on {label}: allowed ")
    assert line.endswith(" -> clean (detectors cuda -> debug,trace)")
    # a report written before per-test detectors passes, and the output says what the gate could
    # not compare
    (tmp_path / "old").mkdir()
    old = save(tmp_path / "old" / "cuda-torch-2.11.0.json", _without_test_detectors(load(committed)))
    assert cli.main(["report", str(old), *gate]) == 0
    assert ("- report(s) without per-test detectors (written before session schema 4): which "
            f"detectors judged each test not compared for {label}"
            ) in capsys.readouterr().out


def test_reports_from_other_detector_code_than_the_baseline_are_refused_unless_allowed(
        reports, tmp_path, capsys):
    """Why: the baseline kept no detector code, so a gate over runs of other detector code
    compared them, where the README says such runs are refused."""
    base = tmp_path / "baseline.json"
    args = ["report", str(reports / "*.json"), "--baseline", str(base), "--format", "markdown"]
    assert cli.main(args + ["--update-baseline"]) == 0
    for path in reports.glob("*.json"):  # every run rebuilt with new code: not mixed among them
        doc = load(path)
        doc["provenance"]["syncguard"]["code"] = "new-detector-code"
        save(path, doc)
    capsys.readouterr()
    assert cli.main(args + ["--fail-on", "regression"]) == 2
    line = error_line(capsys)
    assert ("refusing to compare runs with a baseline made by different detector code: "
            "torch 2.8.0+cu128 · NVIDIA H200 (code new-detect, the baseline's fixture-de); "
            "torch 2.11.0+cu130 · NVIDIA H200 (code new-detect, the baseline's fixture-de)") in line
    assert "--allow-mixed-commits" in line
    assert cli.main(args + ["--fail-on", "regression", "--allow-mixed-commits"]) == 0
    assert "made by other detector code than the baseline" in capsys.readouterr().out


def test_a_run_no_longer_measured_is_dropped_from_the_baseline_on_purpose(reports, tmp_path, capsys):
    base = tmp_path / "baseline.json"
    every = ["report", str(reports / "*.json"), "--baseline", str(base), "--format", "json"]
    assert cli.main(every + ["--update-baseline", "--allow-mixed-commits"]) == 0
    rest = ["report", str(reports / "cuda-torch-2.11.0.json"), "--baseline", str(base),
            "--format", "json"]
    capsys.readouterr()
    # without the 2.8.0 and CPU reports their kept baseline runs are regressions ...
    assert cli.main(rest + ["--fail-on", "regression"]) == 1
    # ... until they are dropped on purpose (a whole label or a torch version), which the
    # accepted diff says
    assert cli.main(rest + ["--update-baseline", "--drop-baseline-run", "2.8.0",
                            "--drop-baseline-run", "torch 2.13.0+cpu · cpu"]) == 0
    err = capsys.readouterr().err
    assert "- run torch 2.8.0+cu128 · NVIDIA H200" in err and "- run torch 2.13.0+cpu · cpu" in err
    assert sorted(load(base)["runs"]) == ["torch 2.11.0+cu130 · NVIDIA H200"]
    assert cli.main(rest + ["--fail-on", "regression"]) == 0


@pytest.mark.parametrize("extra, message", [
    (["--drop-baseline-run", "2.8.0"], "--drop-baseline-run needs --update-baseline"),
    (["--update-baseline", "--drop-baseline-run", "1.0"], "--drop-baseline-run '1.0': no baseline run matches"),
    # a run among the inputs is written back by the update: dropping it did nothing, silently
    (["--update-baseline", "--drop-baseline-run", "2.8.0"],
     "--drop-baseline-run '2.8.0': run 'torch 2.8.0+cu128 · NVIDIA H200' is among the input reports"),
])
def test_drop_baseline_run_refuses_bad_input_in_one_line(reports, tmp_path, capsys, extra, message):
    base = tmp_path / "baseline.json"
    assert cli.main(["report", str(reports / "cuda-torch-2.8.0.json"), "--baseline", str(base),
                     "--update-baseline", "--format", "json"]) == 0
    before = base.read_text()
    capsys.readouterr()
    assert cli.main(["report", str(reports / "cuda-torch-2.8.0.json"), "--baseline", str(base),
                     "--format", "json"] + extra) == 2
    assert message in error_line(capsys)
    assert base.read_text() == before


# -- fuzz: whatever the input, exit 0 or 2, one line on stderr, nothing written ----------------

from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20)
_REAL = sorted(FIXTURES.glob("*.json"))
_KEYS = ("schema_version", "kind", "environment", "provenance", "tests", "complete", "summary",
         "nodeid", "outcome", "audit", "syncs", "allowed", "races", "measurements", "api", "kind",
         "lineno", "filename", "examples", "duration_s", "samples", "median_ms")


def _mutate(node, path: list, value):
    """Replace, at ``path`` (indices taken modulo the container size), the item with ``value``."""
    if not path or not isinstance(node, (dict, list)) or not node:
        return value
    keys = list(node) if isinstance(node, dict) else list(range(len(node)))
    key = keys[path[0] % len(keys)]
    node[key] = _mutate(node[key], path[1:], value)
    return node


@st.composite
def _inputs(draw) -> bytes:
    how = draw(st.sampled_from(["bytes", "json", "mutated", "deleted_key", "truncated"]))
    if how == "bytes":
        return draw(st.binary(max_size=200))
    if how == "json":
        return json.dumps(draw(_JSON)).encode()
    real = json.loads(draw(st.sampled_from(_REAL)).read_text())
    if how == "truncated":
        text = json.dumps(real).encode()
        return text[:draw(st.integers(0, len(text)))]
    path = draw(st.lists(st.integers(0, 50), min_size=1, max_size=5))
    if how == "deleted_key":
        key = draw(st.sampled_from(_KEYS))
        target = real
        for step in path[:-1]:
            if isinstance(target, dict) and target:
                target = target[list(target)[step % len(target)]]
            elif isinstance(target, list) and target:
                target = target[step % len(target)]
        if isinstance(target, dict):
            target.pop(key, None)
        return json.dumps(real).encode()
    return json.dumps(_mutate(real, path, draw(_JSON)), allow_nan=True).encode()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(data=_inputs(), role=st.sampled_from(["report", "baseline"]),
       fmt=st.sampled_from(["table", "markdown", "json"]),
       gate=st.sampled_from([[], ["--fail-on", "regression"], ["--update-baseline"]]))
def test_fuzzed_input_exits_0_or_2_with_one_line_and_writes_nothing(tmp_path_factory, data, role,
                                                                     fmt, gate):
    folder = tmp_path_factory.mktemp("fuzz")
    good = folder / "good.json"
    shutil.copy(FIXTURES / "cuda-torch-2.11.0.json", good)
    fuzzed = folder / "fuzzed.json"
    fuzzed.write_bytes(data)
    out = folder / "out.txt"
    base = folder / "base.json"
    if role == "baseline":
        base.write_bytes(data)
        argv = ["report", str(good), "--baseline", str(base)]
    else:
        argv = ["report", str(good), str(fuzzed)] + (["--baseline", str(base)] if gate else [])
    argv += ["--format", fmt, "--output", str(out), "--allow-mixed-commits"] + gate
    code, _ = _exits_0_or_2_writing_nothing(argv, folder, gate == ["--fail-on", "regression"])
    event(f"exit {code}")


def _exits_0_or_2_writing_nothing(argv: list[str], folder: Path, gated: bool = False
                                  ) -> tuple[int, str]:
    """Run the command in this process (an exception fails the test, as a traceback would fail
    the user): exit 0, 1 only when ``gated``, or 2 with one ``syncguard: error:`` line and
    ``folder`` as it was. Returns (exit code, stderr)."""
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(argv)
    assert code in (0, 1, 2) if gated else code in (0, 2)
    if code == 2:
        lines = err.getvalue().splitlines()
        assert len(lines) == 1 and lines[0].startswith("syncguard: error: "), err.getvalue()
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == before, "bad input wrote"
    else:
        assert "Traceback" not in err.getvalue()
    return code, err.getvalue()


# -- one field of a real document, of the wrong type, at any depth ------------------------------

#: a session report of schema 3 (4 only adds a test's detectors): per-site records with phases,
#: a provenance with detectors_ran, an allowed sync, recorded values (the fixtures above are
#: version 1)
V3 = Path(__file__).parent / "fixtures" / "session-v3" / "sample-serial.json"
ATLAS_RUNS = ROOT / "reports" / "atlas-runs"


def _small_corpus_run() -> dict:
    """corpus-run-2.11.0.json with a few snippets (one that waits, one that copies, the first
    without ground truth if any): every shape the atlas reads, at a fraction of the size."""
    run = json.loads((ATLAS_RUNS / "corpus-run-2.11.0.json").read_text())
    snippets = run["snippets"]
    keep = snippets[:2] + [s for s in snippets if s["truth"].get("waits")][:2] + [
        s for s in snippets if s.get("error") or not s["truth"].get("ok")][:1]
    run["snippets"] = [{k: v for k, v in s.items() if k not in ("detectors", "agreement")}
                       for s in keep]
    return run


def _paths(node, path=()):
    """Every path into a JSON document (keys and indexes), containers included, root excluded."""
    if path:
        yield path
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(
        node, list) else ()
    for key, value in items:
        yield from _paths(value, (*path, key))


def _set(doc, path, value):
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


_WRONG = (st.none() | st.booleans() | st.integers(-3, 3)
          | st.sampled_from([2**63, -2**63 - 1, 10**30, 10**400])
          | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=4)
          | st.lists(st.integers(0, 3) | st.text(max_size=2), max_size=2)
          | st.dictionaries(st.text(max_size=3), st.none() | st.integers(-1, 3), max_size=2))

_DOCS = {"report": json.loads(V3.read_text()), "corpus run": _small_corpus_run(),
         "report v1": json.loads((FIXTURES / "cuda-torch-2.8.0.json").read_text()),
         "merge benchmark": json.loads((ATLAS_RUNS / "merge-split-2.11.0.json").read_text())}
_DOC_PATHS = {name: list(_paths(doc)) for name, doc in _DOCS.items()}


@st.composite
def _one_wrong_field(draw, names) -> tuple[str, bytes]:
    """(which document, its text with one field, anywhere, replaced by a value of another type)."""
    name = draw(st.sampled_from(names))
    doc = json.loads(json.dumps(_DOCS[name]))
    path = draw(st.sampled_from(_DOC_PATHS[name]))
    value = draw(_WRONG)
    event(f"{name}: {type(value).__name__}")
    _set(doc, path, value)
    return name, json.dumps(doc, allow_nan=True).encode()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(fuzzed=_one_wrong_field(["report", "report v1"]), fmt=st.sampled_from(["table", "markdown", "json"]),
       gate=st.sampled_from([[], ["--fail-on", "any"], ["--update-baseline"]]))
def test_a_report_with_one_field_of_the_wrong_type_exits_0_or_2(tmp_path_factory, fuzzed, fmt,
                                                                gate):
    """The report alone (a second report of the same run would stop at "both reports of run"
    before the matrix read the changed field); one of version 3, one of version 1 (events)."""
    folder = tmp_path_factory.mktemp("fuzz")
    bad = folder / "fuzzed.json"
    bad.write_bytes(fuzzed[1])
    argv = ["report", str(bad), "--format", fmt, "--output", str(folder / "out.txt"),
            *(["--baseline", str(folder / "base.json")] if gate == ["--update-baseline"] else []),
            *gate]
    code, _ = _exits_0_or_2_writing_nothing(argv, folder, gate == ["--fail-on", "any"])
    event(f"exit {code}")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(fuzzed=_one_wrong_field(["corpus run", "merge benchmark"]),
       fmt=st.sampled_from(["table", "markdown", "json"]))
def test_an_atlas_run_with_one_field_of_the_wrong_type_exits_0_or_2(tmp_path_factory, fuzzed,
                                                                   fmt):
    """A corpus run and the merge benchmark of the same torch, one of them changed: the atlas
    joins them, so both are read through."""
    folder = tmp_path_factory.mktemp("fuzz")
    name, text = fuzzed
    corpus, bench = folder / "corpus.json", folder / "bench.json"
    corpus.write_text(json.dumps(_DOCS["corpus run"]))
    bench.write_text(json.dumps(_DOCS["merge benchmark"]))
    (corpus if name == "corpus run" else bench).write_bytes(text)
    argv = ["atlas", str(corpus), str(bench), "--format", fmt, "--output", str(folder / "out")]
    code, _ = _exits_0_or_2_writing_nothing(argv, folder)
    event(f"exit {code}")


def _first(doc: dict, key: str) -> dict:
    """The first record under ``key`` ("syncs" or "allowed") of any test of a session report."""
    return next(r for t in doc["tests"] for r in t[key])


# (what to change, the words the one line must carry); each crashed with a traceback before
REPORT_CASES = [
    (lambda d: d.update(tests=[1]), "malformed test entry 1"),
    (lambda d: d["tests"][0].update(measurements="x"), "measurements is 'x', not an object"),
    (lambda d: d["tests"][0].update(measurements={"t": 10**400}), "measurements is"),
    (lambda d: _first(d, "syncs").update(phases="x"), "phases is 'x', not an object of counts"),
    (lambda d: _first(d, "syncs").update(phases={"run": None}), "phases is {'run': None}"),
    (lambda d: _first(d, "syncs").update(phases={"run": 10**30}), "phases is {'run': 1000"),
    (lambda d: _first(d, "allowed").update(phases={"run": None}), "phases is {'run': None}"),
    (lambda d: _first(d, "syncs").update(api=1), "api is 1, not a string"),
    (lambda d: _first(d, "syncs").update(ops=1), "ops is 1, not a list of strings"),
    (lambda d: _first(d, "syncs").update(ops={}), "ops is {}, not a list of strings"),
    (lambda d: _first(d, "syncs").update(filename=1), "filename is 1, not a string or null"),
    (lambda d: _first(d, "syncs").update(detectors=1), "detectors is 1, not a list of strings"),
    (lambda d: _first(d, "syncs").update(count=10**30), "count is 1000"),
    (lambda d: d["provenance"].update(detectors_ran=1), "detectors_ran is 1, not a string"),
    (lambda d: d["tests"][0].update(detectors="cuda"),
     "detectors is 'cuda', not a list of strings or null"),
    (lambda d: d.update(schema_version=True), "session report has schema_version True"),
]


@pytest.mark.parametrize("change, message", REPORT_CASES)
def test_a_report_field_of_the_wrong_type_is_one_line_naming_it(tmp_path, change, message):
    doc = json.loads(V3.read_text())
    change(doc)
    bad = save(tmp_path / "bad.json", doc)
    code, err = _exits_0_or_2_writing_nothing(
        ["report", str(bad), "--output", str(tmp_path / "out")], tmp_path)
    assert code == 2 and "bad.json: " in err and message in err, err


def _snippet(d: dict) -> dict:
    return d["snippets"][0]


ATLAS_CASES = [
    (lambda d: d.update(snippets=None), "corpus run: snippets is None, not a list"),
    (lambda d: d.update(summary=None), "corpus run: summary is None, not an object"),
    (lambda d: d.update(provenance=None), "corpus run: provenance is None, not an object"),
    (lambda d: d["snippets"].__setitem__(0, {}), "snippets[0] has no 'id'"),
    (lambda d: _snippet(d).update(id=[]), "snippets[0]: id is [], not a string"),
    (lambda d: _snippet(d).update(truth=1), "snippets[0]: truth is 1, not an object or null"),
    (lambda d: _snippet(d)["truth"].update(waits=None), "snippets[0].truth: waits is None"),
    (lambda d: _snippet(d)["truth"]["waits"].__setitem__(0, {}),
     "snippets[0].truth.waits[0] has no 'kind'"),
    (lambda d: d["summary"].update(default=1), "summary: default is 1, not an object or null"),
    (lambda d: d["summary"]["default"].update(events="x"),
     "summary.default: events is 'x', not a finite number"),
    (lambda d: d["provenance"].update(git_commit=7), "provenance: git_commit is 7"),
    (lambda d: d.update(schema_version=2.0), "corpus run has schema_version 2.0"),
]


@pytest.mark.parametrize("change, message", ATLAS_CASES)
def test_an_atlas_run_field_of_the_wrong_type_is_one_line_naming_it(tmp_path, change, message):
    doc = json.loads((ATLAS_RUNS / "corpus-run-2.11.0.json").read_text())
    assert _snippet(doc)["truth"]["waits"], "the first snippet of the run no longer waits"
    change(doc)
    bad = save(tmp_path / "bad.json", doc)
    code, err = _exits_0_or_2_writing_nothing(
        ["atlas", str(bad), "--format", "markdown", "--output", str(tmp_path / "out.md")], tmp_path)
    assert code == 2 and "bad.json: " in err and message in err, err


def test_atlas_output_naming_one_of_its_runs_is_refused_and_overwrites_nothing(tmp_path, capsys):
    """Why: ``syncguard atlas run.json --output run.json`` replaced its input with the atlas
    and exited 0; it is refused, as ``syncguard report`` refuses it (one shared check)."""
    run = tmp_path / "run.json"
    shutil.copy(ATLAS_RUNS / "corpus-run-2.11.0.json", run)
    before = run.read_bytes()
    assert cli.main(["atlas", str(run), "--format", "markdown", "--output", str(run)]) == 2
    assert "is one of the input runs; refusing to overwrite it" in error_line(capsys)
    assert run.read_bytes() == before


def _report_with_tests(tmp_path, tests) -> tuple[int, str]:
    """``syncguard report`` on a good report and a copy of it whose ``tests`` are ``tests``:
    (exit code, stderr)."""
    good = tmp_path / "good.json"
    shutil.copy(FIXTURES / "cuda-torch-2.11.0.json", good)
    raw = json.loads(good.read_text())
    raw["tests"] = tests
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["report", str(good), str(bad), "--allow-mixed-commits"])
    return code, err.getvalue()


@pytest.mark.parametrize("entry", ["\f", "a\u2028b", {"nodeid": "t\x1c::x", "audit": "?"}])
def test_an_error_naming_a_line_breaking_character_is_still_one_line(tmp_path, entry):
    """Why: hypothesis found a report whose test entry was a form feed; the error quoted it, and
    str.splitlines() (like a terminal or a CI log parser) made two lines of the message."""
    code, err = _report_with_tests(tmp_path, [entry])
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("syncguard: error: "), err


@pytest.mark.parametrize("records", [[{"count": 1, "stack": True}], [{"count": 1, "stack": 7}], 5])
def test_a_stack_or_record_list_of_the_wrong_shape_is_one_line(tmp_path, records):
    """Why: hypothesis found a sync record whose packed stack was ``true``; unpacking the stacks
    iterated it and raised TypeError, a traceback instead of the one-line error."""
    code, err = _report_with_tests(tmp_path, [{"nodeid": "t.py::x", "audit": "audited", "syncs": records}])
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("syncguard: error: "), err


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
    from syncguard.reporting.formats import FORMATS
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


def test_a_baseline_that_cannot_be_written_leaves_the_output_unwritten(tmp_path, capsys):
    """Why: the table went to --output, then writing the baseline failed and the command said
    "error", exit 2, with the output already written (and the table on stdout without it)."""
    good = tmp_path / "good.json"
    shutil.copy(FIXTURES / "cuda-torch-2.11.0.json", good)
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    baseline = blocked / "baseline.json"  # a folder that is a file: cannot be written
    out = tmp_path / "out.md"
    for output in (["--output", str(out)], []):
        code = cli.main(["report", str(good), "--baseline", str(baseline), "--update-baseline",
                         *output])
        captured = capsys.readouterr()
        assert code == 2 and not out.exists() and captured.out == ""
        assert captured.err.startswith(f"syncguard: error: {baseline}: cannot write")


def test_a_report_given_only_as_its_own_baseline_is_named_as_such(tmp_path, capsys):
    good = tmp_path / "good.json"
    shutil.copy(FIXTURES / "cuda-torch-2.11.0.json", good)
    assert cli.main(["report", str(good), "--baseline", str(good)]) == 2
    assert capsys.readouterr().err == (f"syncguard: error: {str(good)!r} is only the baseline "
                                       f"({good}); give the session reports to compare with it\n")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_standard_output_that_cannot_be_written_is_exit_2_in_one_line():
    """Exit 1 is the gate's; a full disk behind stdout had given a traceback and exit 1."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "syncguard", "report",
                               str(FIXTURES / "cuda-torch-2.11.0.json"), "--format", "json"],
                              stdout=full, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "syncguard: error: cannot write to standard output (No space left on device)"]


# -- counts a report cannot truthfully hold --------------------------------------------------
# Found by a reviewer: a report claiming about 10**9 syncs at one site was accepted, and the matrix
# (one phrase per sync: the gate counts syncs, --format json lists them) exhausted memory. Each
# case runs in a subprocess whose address space is capped, so that the code before the fix fails
# the test with a MemoryError instead of taking the machine's memory.

BILLION = 10**9  # far past any suite: the largest committed report holds 1159 syncs in all
SIX_MILLION = 6 * 10**6


def _two_records(d: dict) -> None:
    """Two records of six million syncs each: each alone is a plausible count, the report's
    total (twelve million) is past the most a report holds."""
    rec = _first(d, "syncs")
    rec.update(count=SIX_MILLION, phases={"run": SIX_MILLION})
    d["tests"][0]["syncs"].append(dict(rec, lineno=(rec["lineno"] or 0) + 1))


HUGE_CASES = [
    (lambda d: _first(d, "syncs").update(count=BILLION, phases={"run": BILLION}),
     f"syncs[0]: count {BILLION} "),
    (lambda d: _first(d, "syncs").update(count=BILLION, phases={}), f"syncs[0]: count {BILLION} "),
    (lambda d: _first(d, "allowed").update(count=BILLION, phases={"run": BILLION}),
     f"allowed[0]: count {BILLION} "),
    (lambda d: _first(d, "syncs").update(count=1, phases={"run": BILLION}),
     f"phases add up to {BILLION}, not its count 1"),
    (_two_records, f"syncs[1]: count {SIX_MILLION} "),
]


def _report_in_a_small_address_space(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    import resource

    def cap():  # 1.5 GiB: ample for these fixtures, far short of a billion phrases
        resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))
    return subprocess.run([sys.executable, "-m", "syncguard", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=120, preexec_fn=cap,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("change, message", HUGE_CASES)
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_report_claiming_more_syncs_than_a_report_holds_is_one_line(tmp_path, change, message,
                                                                     fmt):
    doc = json.loads(V3.read_text())
    change(doc)
    save(tmp_path / "bad.json", doc)
    res = _report_in_a_small_address_space(["report", "bad.json", "--format", fmt,
                                            "--output", "out"], tmp_path)
    lines = res.stderr.splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr[-2000:]
    assert lines[0].startswith("syncguard: error: ") and "bad.json: " in lines[0], lines
    assert message in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_a_report_at_the_most_it_holds_is_read_one_more_is_not(tmp_path, monkeypatch, capsys):
    """The bound counts every record of every test (syncs, allowed, outside), all together."""
    from syncguard.records import schema

    doc = json.loads(V3.read_text())
    total = sum(r["count"] for t in doc["tests"] for k in ("syncs", "allowed", "outside")
                for r in t[k])
    save(tmp_path / "r.json", doc)
    monkeypatch.setattr(schema, "MAX_SYNCS", total)
    assert cli.main(["report", str(tmp_path / "r.json"), "--format", "markdown"]) == 0
    monkeypatch.setattr(schema, "MAX_SYNCS", total - 1)
    assert cli.main(["report", str(tmp_path / "r.json"), "--format", "markdown"]) == 2
    assert f"more than the {total - 1} syncs a report holds" in error_line(capsys)


@pytest.mark.parametrize("field", ["syncs", "allowed", "budget", "sync_sites"])
def test_a_baseline_claiming_more_syncs_than_a_report_holds_is_one_line(reports, tmp_path,
                                                                       capsys, field):
    """A baseline entry is one report's case: it cannot hold more than a report does."""
    base = tmp_path / "baseline.json"
    assert cli.main(["report", str(reports / "cuda-torch-2.8.0.json"), "--baseline", str(base),
                     "--update-baseline", "--format", "json"]) == 0
    data = load(base)
    (run,) = data["runs"].values()
    e = run[NOSYNC]
    if field in ("syncs", "allowed"):
        e[field] = BILLION
    else:
        e[field] = {"cudaStreamSynchronize in f (x.py)": BILLION}
    save(base, data)
    capsys.readouterr()
    assert cli.main(["report", str(reports / "cuda-torch-2.8.0.json"), "--baseline", str(base),
                     "--fail-on", "regression", "--format", "json"]) == 2
    line = error_line(capsys)
    assert "baseline.json: " in line and NOSYNC in line and f"{field}" in line and (
        str(BILLION) in line), line
