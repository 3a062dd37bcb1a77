"""A predicted run is labelled "predicted" in the session report, every ``syncguard report``
format and the gate (issue 45, section 5).

The reports here are written by syncguard's own writer (sessionfile.SessionFile) from entries
built by hand: what a predicted session hands it (events with ``detectors=("predict",)`` and the
rules' note). Nothing is predicted or measured here; the expected labels are written by hand.
"""
from __future__ import annotations

import json

import pytest

from syncguard import cli
from syncguard.attribution.aggregate import aggregate
from syncguard.records.events import SyncEvent
from syncguard.reporting import formats, matrix as mx
from syncguard.reporting.sessionfile import (SessionFile, TestEntry, is_predicted, load_document)
from syncguard.records.schema import SchemaError

NOTE = "predicted from the rules of torch 2.11.0 measured on a GPU (rule: run x)"
WHY = "auto: this machine has no CUDA"


def _tests(detectors=("predict",)) -> list[TestEntry]:
    sync = SyncEvent(api="cudaMemcpyAsync", kind="blocking_copy_h2d", op="aten::copy_",
                     filename="/p/m.py", lineno=3, function="f", detectors=detectors,
                     note=NOTE if detectors == ("predict",) else None)
    syncs = tuple(aggregate([sync])[0])
    return [TestEntry("t.py::test_sync", "passed", "syncs", syncs=syncs, detectors=detectors,
                      detector_reason=f"{detectors[0]}: ..."),
            TestEntry("t.py::test_clean", "passed", "clean", detectors=detectors,
                      detector_reason=f"{detectors[0]}: ..."),
            TestEntry("t.py::test_unseen", "passed", "not_audited",
                      reason="1 call(s) not predicted, first: aten::foo")]


def _write(path, predicted=True, **options) -> dict:
    opts = {"mode": "record", "detectors": ["auto"], "predict": predicted, **options}
    if predicted:
        opts.setdefault("predict_why", WHY)
    f = SessionFile(path, opts)
    f.write(_tests() if predicted else _tests(("debug",)), complete=True, final=True)
    return json.loads(path.read_text())


def test_the_session_report_says_predicted_and_old_reports_still_load(tmp_path):
    doc = _write(tmp_path / "r.json")
    assert doc["predicted"] is True and doc["options"]["predict_why"] == WHY
    assert is_predicted(load_document(tmp_path / "r.json"))
    # a report written before the field: options.predict says it, or nothing predicted
    for predict, expected in ((True, True), (False, False)):
        old = {k: v for k, v in doc.items() if k != "predicted"}
        old["options"] = {**doc["options"], "predict": predict}
        (tmp_path / "old.json").write_text(json.dumps(old))
        assert is_predicted(load_document(tmp_path / "old.json")) is expected
    (tmp_path / "bad.json").write_text(json.dumps({**doc, "predicted": "yes"}))
    with pytest.raises(SchemaError, match=r"'predicted' is 'yes', not true or false$"):
        load_document(tmp_path / "bad.json")


def _matrix(*paths) -> mx.Matrix:
    return mx.build([(str(p), load_document(p)) for p in paths])


def test_cells_read_predicted_and_not_predicted(tmp_path):
    _write(tmp_path / "r.json")
    m = _matrix(tmp_path / "r.json")
    (run,) = m.runs
    assert run.predicted and run.predict_why == WHY
    assert m.cell(run.label, "t.py::test_sync").text == "1 sync (blocking_copy_h2d), predicted"
    assert m.cell(run.label, "t.py::test_clean").text == "clean, predicted"
    assert m.cell(run.label, "t.py::test_unseen").text == (
        "not predicted (1 call(s) not predicted, first: aten::foo)")


def test_a_measured_run_reads_as_before(tmp_path):
    _write(tmp_path / "r.json", predicted=False)
    m = _matrix(tmp_path / "r.json")
    (run,) = m.runs
    assert not run.predicted
    assert m.cell(run.label, "t.py::test_sync").text == "1 sync (blocking_copy_h2d)"
    assert m.cell(run.label, "t.py::test_unseen").text == "not audited (no CUDA)"  # a CPU run


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_every_text_format_opens_with_the_prediction_never_the_cpu_note(tmp_path, fmt):
    _write(tmp_path / "r.json")
    text = formats.FORMATS[fmt].text(_matrix(tmp_path / "r.json"), None, True)
    assert "A CPU run checks no sync" not in text
    assert formats.PREDICTED_NOTE.split(":")[0] in text.split("PREDICTED, not measured")[0]
    assert ("PREDICTED, not measured: CUDA code ran on CPU stand-ins for torch "
            f"{_matrix(tmp_path / 'r.json').runs[0].torch} with the rules measured on a GPU on "
            f"torch 2.11.0 ({WHY})") in text
    assert "2 test(s) predicted: 1 clean, 1 with syncs, 0 allowed only; 1 not predicted" in text
    assert "1 sync (blocking_copy_h2d), predicted" in text


def test_json_marks_the_run_and_its_cells(tmp_path):
    _write(tmp_path / "r.json")
    doc = json.loads(formats.render_json(_matrix(tmp_path / "r.json")))
    assert [r["predicted"] for r in doc["runs"]] == [True]
    assert doc["notes"] == [formats.PREDICTED_NOTE]
    texts = {c["nodeid"]: next(iter(c["cells"].values()))["text"] for c in doc["cases"]}
    assert texts["t.py::test_sync"] == "1 sync (blocking_copy_h2d), predicted"


def _report(capsys, *args) -> tuple[int, str]:
    code = cli.main(["report", *map(str, args)])
    return code, capsys.readouterr().err


def test_the_gate_refuses_a_prediction_for_a_measurement_unless_asked(tmp_path, capsys):
    """A measured baseline of the run's label: refused in one line; --allow-predicted compares
    and says so; a baseline written from a predicted run (predicted: true) is gated as usual."""
    report, baseline = tmp_path / "r.json", tmp_path / "b.json"
    _write(report, predicted=False)
    assert _report(capsys, report, "--baseline", baseline, "--update-baseline")[0] == 0
    assert "predicted" not in json.loads(baseline.read_text())["provenance"][
        _matrix(report).runs[0].label]
    _write(report)  # the same run label, predicted now
    code, err = _report(capsys, report, "--baseline", baseline, "--fail-on", "regression")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("syncguard: error: refusing to compare predicted runs with a measured "
                          "baseline: ") and "--allow-predicted" in err
    code = cli.main(["report", str(report), "--baseline", str(baseline), "--format", "json",
                     "--allow-predicted"])
    notes = json.loads(capsys.readouterr().out)["baseline"]["notes"]
    assert code == 0 and any("predicted, not measured, compared with a measured baseline" in n
                             for n in notes), notes
    predicted_baseline = tmp_path / "pb.json"
    assert _report(capsys, report, "--baseline", predicted_baseline, "--update-baseline")[0] == 0
    label = _matrix(report).runs[0].label
    assert json.loads(predicted_baseline.read_text())["provenance"][label]["predicted"] is True
    assert _report(capsys, report, "--baseline", predicted_baseline, "--fail-on",
                   "regression")[0] == 0
