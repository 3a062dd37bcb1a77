"""Weaker-detector marks: a test whose regions ran weaker detectors than it asked for is marked in
the session report, the terminal summary and every ``syncguard report`` format.

No GPU here: the region reports are built by hand as a fallen-back region reports itself (the
detectors it ran, its detector reason, its notes), and the session reports are the committed
H200 run (reports/cuda-torch-2.11.0.json) with one test edited as a fallback would have written
it. What the GPU does is proven by tests/gpu/test_profiler_scenarios.py.
"""
from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from syncguard import cli
from syncguard.pytest_plugin.options import Plan
from syncguard.pytest_plugin.session import ItemState, entry_for, merged
from syncguard.records.events import RegionReport
from syncguard.records.schema import SchemaError
from syncguard.reporting import sessionfile
from syncguard.reporting.explain import summary_lines
from syncguard.reporting.sessionfile import TestEntry, summarize
from syncguard.reporting.weaker import expected, weaker_mark

ROOT = Path(__file__).parent.parent
COMMITTED = ROOT / "reports" / "cuda-torch-2.11.0.json"
WHY = "cuptiSubscribe failed: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
FELL_BACK = RegionReport(detectors=("debug", "trace"),
                         detector_reason=f"debug,trace: cuda detector not used ({WHY})",
                         notes=[f"cuda detector not used: {WHY}"])


@pytest.mark.parametrize("asked, ran, reason, notes, want", [
    # auto resolved to the fallback before arming: the resolve reason, without its names
    (("auto",), ("debug", "trace"), "debug,trace: cuda detector unavailable (no libcupti)", [],
     {"detectors": "debug,trace", "reason": "cuda detector unavailable (no libcupti)"}),
    # cuda asked by name, its arm refused: the region's note says why
    (("cuda",), ("debug", "trace"), f"debug,trace: cuda detector not used ({WHY})",
     [f"cuda detector not used: {WHY}"],
     {"detectors": "debug,trace", "reason": f"cuda detector not used: {WHY}"}),
    # races ride along and are no detector strength
    (("auto",), ("debug", "trace", "races"), "debug,trace: x", [],
     {"detectors": "debug,trace", "reason": "x"}),
    (("auto",), ("cuda",), "cuda: CUPTI callbacks", [], None),
    (("auto", "profile"), ("cuda", "profile"), None, [], None),  # cuda sees what they see
    (("debug", "trace"), ("debug", "trace"), None, [], None),  # what was asked ran
    (("auto", "profile"), ("debug", "trace", "profile"), "x", [], None),  # profile holds CUPTI
    (("auto",), ("predict",), "predict: ...", [], None),  # a prediction is a mode, not weaker
    (("fake",), ("fake",), None, [], None),
    (("auto",), (), None, [], None),  # nothing armed (not audited): not judged at all
])
def test_a_region_is_marked_when_it_ran_less_than_asked(asked, ran, reason, notes, want):
    report = RegionReport(detectors=ran, detector_reason=reason, notes=list(notes))
    assert weaker_mark(asked, report) == want


def test_a_region_that_lent_cupti_to_a_profiler_is_marked_with_the_detectors_reason():
    cuda = RegionReport(detectors=("cuda",), detector_reason="cuda: CUPTI callbacks")
    lent = "torch.profiler started at t.py:3 and took CUPTI (one subscriber per process)"
    assert weaker_mark(("auto",), cuda, lent) == {"detectors": "cuda, then debug", "reason": lent}
    assert weaker_mark(("auto",), cuda, None) is None
    # a region that never armed the cuda detector is marked by what it ran, as before
    assert weaker_mark(("auto",), FELL_BACK, lent)["detectors"] == "debug,trace"
    assert weaker_mark(("debug", "trace"), FELL_BACK, lent) is None


def test_auto_stands_for_the_cuda_detector_unless_the_profile_detector_holds_cupti():
    assert expected(("auto",)) == ("cuda",)
    assert expected(("auto", "races")) == ("cuda", "races")
    assert expected(("auto", "profile")) == ("debug", "trace", "profile")
    assert expected(("debug",)) == ("debug",)


def _entry(asked: tuple[str, ...], report: RegionReport, lent: str | None = None) -> TestEntry:
    """entry_for over a stand-in item (node id and user properties are all it reads)."""
    item = types.SimpleNamespace(nodeid="t.py::test_x", user_properties=[])
    state = ItemState(Plan(audited=True, mode="fail", detectors=asked, races=False),
                      report=report, lent=lent)
    return entry_for(item, state, worker=None)


def test_the_session_entry_carries_the_mark_and_reads_back(tmp_path):
    entry = _entry(("auto",), FELL_BACK)
    assert entry.weaker == {"detectors": "debug,trace", "reason": f"cuda detector not used: {WHY}"}
    assert entry.detectors == ("debug", "trace")  # what the gate compares, unchanged
    assert _entry(("debug", "trace"), FELL_BACK).weaker is None
    cuda = RegionReport(detectors=("cuda",), detector_reason="cuda: C")
    assert _entry(("auto",), cuda, lent="lent to a profiler").weaker == {
        "detectors": "cuda, then debug", "reason": "lent to a profiler"}
    # written to the file and read back as it was
    f = sessionfile.SessionFile(tmp_path / "s.json", {"detectors": ["auto"]})
    f.write([entry, _entry(("debug", "trace"), FELL_BACK)], complete=True, final=True)
    raw = json.loads((tmp_path / "s.json").read_text())
    assert raw["schema_version"] == 5
    assert [("weaker" in t) for t in raw["tests"]] == [True, False]  # written only where marked
    back = sessionfile.load_document(tmp_path / "s.json")["tests"]
    assert [t.weaker for t in back] == [entry.weaker, None]


def test_a_fixture_test_is_as_weak_as_its_weakest_region():
    cuda = RegionReport(detectors=("cuda",), detector_reason="cuda: CUPTI callbacks")
    assert merged([cuda, FELL_BACK]).detectors == ("debug", "trace")
    assert merged([cuda, cuda]).detectors == ("cuda",)
    assert _entry(("auto",), merged([cuda, FELL_BACK])).weaker["detectors"] == "debug,trace"


def test_the_terminal_summary_says_how_many_tests_and_why():
    tests = [_entry(("auto",), FELL_BACK), _entry(("auto",), FELL_BACK),
             _entry(("auto",), RegionReport(detectors=("cuda",), detector_reason="cuda: C"))]
    lines = summary_lines(tests, summarize(tests))
    (line,) = [x for x in lines if x.startswith("WEAKER")]
    assert line == ("WEAKER DETECTORS: 2 test(s) judged by weaker detectors than asked for, "
                    f"marked [weaker: ...]: debug,trace (cuda detector not used: {WHY}) x2")
    assert not [x for x in summary_lines(tests[2:], summarize(tests[2:])) if "WEAKER" in x]


@pytest.mark.parametrize("bad, words", [
    ({"detectors": "debug"}, "weaker has ['detectors'], not ['detectors', 'reason']"),
    ({"detectors": 1, "reason": "x"}, "weaker is {'detectors': 1, 'reason': 'x'}, not an object "
                                      "of strings or null"),
    ("debug", "weaker is 'debug', not an object of strings or null"),
])
def test_a_bad_weaker_field_is_one_line_naming_it(tmp_path, bad, words):
    doc = json.loads(COMMITTED.read_text())
    doc["tests"][0]["weaker"] = bad
    (tmp_path / "r.json").write_text(json.dumps(doc))
    with pytest.raises(SchemaError, match="weaker") as e:
        sessionfile.load_document(tmp_path / "r.json")
    assert words in str(e.value) and "\n" not in str(e.value)


def _fell_back(doc: dict) -> dict:
    """The committed run with one allowed test as a fallback region would have recorded it: the
    allowed sync unseen, debug,trace in place of cuda, and the mark."""
    t = next(t for t in doc["tests"] if t["audit"] == "allowed" and t["detectors"] == ["cuda"])
    t.update(audit="clean", allowed=[], detectors=["debug", "trace"],
             detector_reason=f"debug,trace: cuda detector not used ({WHY})",
             weaker={"detectors": "debug,trace", "reason": f"cuda detector not used: {WHY}"})
    return t


def _report(capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(["report", *args])
    return code, capsys.readouterr().out


def test_every_report_format_marks_the_test(tmp_path, capsys):
    doc = json.loads(COMMITTED.read_text())
    t = _fell_back(doc)
    path = tmp_path / "cuda-torch-2.11.0.json"
    path.write_text(json.dumps(doc))
    mark = "[weaker: debug,trace]"
    code, md = _report(capsys, str(path), "--format", "markdown")
    assert code == 0
    assert f"| `{t['nodeid']}` | clean {mark} |" in md  # shown though clean
    assert "WEAKER DETECTORS: 1 test(s)" in md
    code, table = _report(capsys, str(path), "--format", "table")
    row = next(x for x in table.splitlines() if t["nodeid"] in x)
    assert f"clean {mark}" in row and "WEAKER DETECTORS: 1 test(s)" in table
    code, js = _report(capsys, str(path), "--format", "json")
    cells = {c["nodeid"]: next(iter(c["cells"].values())) for c in json.loads(js)["cases"]}
    assert cells[t["nodeid"]]["weaker"] == t["weaker"]
    assert cells[t["nodeid"]]["text"] == f"clean {mark}"
    assert sum("weaker" in c for c in cells.values()) == 1
    # beside another run, the run's note says it (one run's summary is not printed then)
    code, md = _report(capsys, str(path), str(ROOT / "reports" / "cuda-torch-2.8.0.json"),
                       "--format", "markdown")
    label = f"torch {doc['provenance']['torch']} · {doc['provenance']['gpu']}"  # the run's own
    assert f"> {label}: WEAKER DETECTORS: 1 test(s)" in md


def test_the_gate_still_compares_the_detectors_of_a_marked_test(tmp_path, capsys):
    base = tmp_path / "baseline.json"
    code, _ = _report(capsys, str(COMMITTED), "--baseline", str(base), "--update-baseline",
                      "--format", "json")
    assert code == 0
    doc = json.loads(COMMITTED.read_text())
    t = _fell_back(doc)
    path = tmp_path / "cuda-torch-2.11.0.json"
    path.write_text(json.dumps(doc))
    code, out = _report(capsys, str(path), "--baseline", str(base), "--fail-on", "regression",
                        "--format", "markdown")
    assert code == 1
    (line,) = [x for x in out.splitlines() if x.startswith(f"- {t['nodeid']} on ")]
    assert line.endswith(" -> clean [weaker: debug,trace] (detectors cuda -> debug,trace)")


def test_the_session_reads_what_the_cuda_detector_says_of_cupti(monkeypatch):
    """The call phase's record of the cuda detector's ``weaker`` (a fake reason set on the hub,
    as a hand-over to a profiler sets it): what entry_for marks a region that lent CUPTI by."""
    from syncguard import detectors as registry
    from syncguard.pytest_plugin import session

    hub = registry.get("cuda").hub
    monkeypatch.setattr(hub, "weaker", "torch.profiler started at t.py:3 and took CUPTI")
    assert session._lent() == "torch.profiler started at t.py:3 and took CUPTI"
    monkeypatch.setattr(hub, "weaker", None)
    assert session._lent() is None
