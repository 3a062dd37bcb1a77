"""The run matrix over checked-in session reports (tests/fixtures/reports: recorded shapes of H200
runs on torch 2.8.0 and 2.11.0 and a CPU run on 2.13.0; no GPU is used here)."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from syncguard import matrix as mx
from syncguard.events import RaceEvent, SchemaError, SyncEvent
from syncguard.formats import render_markdown, to_json
from syncguard.sessionfile import TestEntry, load_document

FIXTURES = Path(__file__).parent / "fixtures" / "reports"
DECL = "cases/test_merge.py::test_declared_sync[index_put_cpu_mask]"
NOSYNC = "cases/test_merge.py::test_no_sync[index_put_cpu_mask]"
SCATTER = "cases/test_merge.py::test_no_sync[masked_scatter]"
ROWS = "cases/test_merge.py::test_no_sync[index_copy_rows]"
V28, V211, V213 = "cuda-torch-2.8.0", "cuda-torch-2.11.0", "cpu-torch-2.13.0"


def doc(name: str) -> dict:
    """A fixture report as plain JSON (tests as dicts), free to change before building."""
    d = load_document(FIXTURES / f"{name}.json")
    return {**d, "tests": [t.to_dict() for t in d["tests"]]}


def typed(d: dict) -> dict:
    """What load_document gives: the same document with each test a TestEntry."""
    return {**d, "tests": [TestEntry.from_dict(t) for t in d["tests"]]}


def build(*docs: dict) -> mx.Matrix:
    return mx.build((f"r{i}.json", typed(d)) for i, d in enumerate(docs))


def label(d: dict) -> str:
    return mx.make_run(d).label


def entry(d: dict, nodeid: str) -> dict:
    return next(t for t in d["tests"] if t["nodeid"] == nodeid)


def with_torch(d: dict, version: str, device: str) -> dict:
    d = copy.deepcopy(d)
    d["environment"].update(torch=version, device=device, gpu="NVIDIA H200" if device == "cuda" else None)
    return d


@pytest.mark.parametrize("text, expected", [
    ("2.11.0+cu130", (2, 11, 0)), ("2.8.0", (2, 8, 0)), ("2.9.0a0+git1234", (2, 9, 0)),
    ("2.10.0rc1", (2, 10, 0)), ("", ()), (None, ()),
])
def test_parse_version_ignores_local_and_prerelease(text, expected):
    assert mx.parse_version(text) == expected


def test_runs_sort_numerically_and_gpu_before_cpu_of_one_version():
    base = doc(V211)
    m = build(with_torch(base, "2.13.0+cpu", "cpu"), with_torch(base, "2.13.0+cu130", "cuda"),
              with_torch(base, "2.9.1+cu128", "cuda"), with_torch(base, "2.10.0+cu128", "cuda"))
    assert [r.torch for r in m.runs] == ["2.9.1+cu128", "2.10.0+cu128", "2.13.0+cu130", "2.13.0+cpu"]


def test_cells_from_fixtures():
    m = build(doc(V213), doc(V211), doc(V28))
    labels = [r.label for r in m.runs]
    assert labels == [label(doc(V28)), label(doc(V211)), label(doc(V213))]
    text = {(r.torch.split("+")[0], n): m.cell(r.label, n).text for r in m.runs for n in m.nodeids}
    assert text["2.8.0", DECL] == "allowed 2 (pageable_copy, stream_sync)"
    assert text["2.11.0", DECL] == "clean"
    assert text["2.13.0", DECL] == "not audited (no CUDA)"
    assert text["2.8.0", NOSYNC] == "failed + 1 sync (stream_sync)"
    assert text["2.8.0", ROWS] == "missing"
    assert text["2.13.0", SCATTER] == "skipped"
    assert mx.unallowed(m) == [(labels[0], NOSYNC)]


def test_races_count_like_syncs():
    d = doc(V211)
    race = RaceEvent(kind="race", what="read on stream 7 after write on stream 0",
                     filename="cases/test_streams.py", lineno=30)
    entry(d, DECL)["races"] = [race.to_dict()]
    cell = build(d).cell(label(d), DECL)
    assert (cell.state, cell.kinds, cell.text) == ("syncs", ("race",), "1 sync (race)")
    assert "race: read on stream 7 after write on stream 0 at test_streams.py:30" in cell.detail


def test_changes_name_the_sync_and_the_first_clean_version():
    found = {c.nodeid: c for c in mx.changes(build(doc(V28), doc(V211), doc(V213)))}
    assert set(found) == {DECL, NOSYNC, ROWS}  # unchanged cases and the lone CPU run: no entry
    assert found[NOSYNC].series == "NVIDIA H200"
    assert found[NOSYNC].text == ("failed + 1 sync (stream_sync) on 2.8.0 (cudaStreamSynchronize via "
                                  "aten::index_put_ at test_merge.py:41), clean from 2.11.0")
    assert found[DECL].text.startswith("allowed 2 (pageable_copy, stream_sync) on 2.8.0 (cudaMemcpyAsync")
    assert found[ROWS].text == "missing on 2.8.0, clean from 2.11.0"


def test_changes_group_equal_versions_into_spans():
    d28, d211 = doc(V28), doc(V211)
    m = build(d28, with_torch(d28, "2.9.1+cu128", "cuda"), d211, with_torch(d211, "2.14.1+cu130", "cuda"))
    change = next(c for c in mx.changes(m) if c.nodeid == NOSYNC)
    assert change.text.startswith("failed + 1 sync (stream_sync) on 2.8.0 to 2.9.1 (")
    assert change.text.endswith(", clean from 2.11.0")


def test_duplicate_run_is_refused_naming_both_files():
    with pytest.raises(SchemaError, match=r"a\.json and b\.json are both reports of run 'torch 2\.11\.0"):
        mx.build([("a.json", typed(doc(V211))), ("b.json", typed(doc(V211)))])


def test_measurements_show_percent_change_between_versions():
    d28, d211 = doc(V28), doc(V211)
    rows = [r for r in mx.measurement_rows(build(d28, d211)) if r[0] == SCATTER]
    old, new = (entry(d, SCATTER)["measurements"] for d in (d28, d211))
    pct = (new["median_ms"] - old["median_ms"]) / old["median_ms"] * 100
    assert rows[0][2] == f"{old['median_ms']:.2f} ms"  # first version: nothing to compare with
    assert rows[1][2] == f"{new['median_ms']:.2f} ms ({pct:+.1f}%)"
    assert rows[1][3].startswith(f"{new['ratio_to_copy']:.1f}×")
    assert rows[1][4] == "2.0 GiB (+0.0%)"


def test_baseline_round_trip_and_no_deltas_against_itself():
    m = build(doc(V28), doc(V211), doc(V213))
    base = mx.check_baseline(mx.make_baseline(m))
    assert base["runs"][label(doc(V28))][NOSYNC] == {
        "state": "failed", "syncs": 1, "kinds": ["stream_sync"], "allowed": 0, "allowed_kinds": []}
    assert ROWS not in base["runs"][label(doc(V28))]  # missing cells are not accepted outcomes
    assert mx.compare(m, base) == mx.Comparison()


def test_new_sync_or_race_on_a_clean_case_is_a_regression():
    d = doc(V211)
    base = mx.make_baseline(build(d))
    ev = SyncEvent(api="cudaStreamSynchronize", kind="stream_sync", op="aten::nonzero",
                   filename="cases/test_merge.py", lineno=41)
    entry(d, DECL).update(audit="syncs", syncs=[ev.to_dict()])
    entry(d, ROWS)["races"] = [RaceEvent(kind="race", what="host write to pinned buffer").to_dict()]
    cmp = mx.compare(build(d), base)
    why = {r.nodeid: r.why for r in cmp.regressions}
    assert why == {DECL: "syncs 0 -> 1; new kind stream_sync", ROWS: "syncs 0 -> 1; new kind race"}
    assert cmp.improvements == ()


def test_more_syncs_new_kind_and_failing_are_regressions_fewer_is_an_improvement():
    d28 = doc(V28)
    base = mx.make_baseline(build(d28))
    worse, better = copy.deepcopy(d28), copy.deepcopy(d28)
    extra = SyncEvent(api="cudaMemcpy", kind="blocking_copy_d2h", op="aten::item").to_dict()
    entry(worse, NOSYNC)["syncs"].append(extra)
    entry(worse, SCATTER)["outcome"] = "failed"
    entry(better, NOSYNC).update(outcome="passed", audit="clean", syncs=[])
    cmp = mx.compare(build(worse), base)
    assert {r.nodeid: r.why for r in cmp.regressions} == {
        NOSYNC: "syncs 1 -> 2; new kind blocking_copy_d2h", SCATTER: "now fails"}
    cmp = mx.compare(build(better), base)
    assert cmp.regressions == ()
    why = "no longer fails; syncs 1 -> 0; no more stream_sync"
    assert [(d.nodeid, d.before, d.after, d.why) for d in cmp.improvements] == [
        (NOSYNC, "failed + 1 sync (stream_sync)", "clean", why)]


def test_unaudited_cells_never_count_for_sync_behaviour():
    cpu = doc(V213)
    base = mx.make_baseline(build(cpu))
    base["runs"][label(cpu)][DECL] = {"state": "syncs", "syncs": 3, "kinds": ["stream_sync"],
                                      "allowed": 0, "allowed_kinds": []}
    base["runs"][label(cpu)][NOSYNC] = {"state": "clean", "syncs": 0, "kinds": [],
                                        "allowed": 0, "allowed_kinds": []}
    assert mx.compare(build(cpu), base) == mx.Comparison()
    entry(cpu, ROWS)["outcome"] = "failed"  # a failure still counts on a CPU run
    assert [r.nodeid for r in mx.compare(build(cpu), base).regressions] == [ROWS]


def test_runs_and_cases_outside_the_baseline_are_new_not_regressions():
    d28, d211 = doc(V28), doc(V211)
    base = mx.make_baseline(build(d28))
    del base["runs"][label(d28)][SCATTER]
    cmp = mx.compare(build(d28, d211, doc(V213)), base)
    assert cmp.regressions == () and cmp.improvements == ()
    assert cmp.new_runs == (label(d211), label(doc(V213)))
    assert [(d.nodeid, d.after) for d in cmp.new_cases] == [(SCATTER, "clean")]
    d28["tests"] = [t for t in d28["tests"] if t["nodeid"] != DECL]
    assert [d.nodeid for d in mx.compare(build(d28), base).missing] == [DECL]


def test_update_keeps_runs_not_in_the_update():
    old = mx.make_baseline(build(doc(V28), doc(V211)))
    new = mx.make_baseline(build(doc(V213)), old)
    assert list(new["runs"]) == sorted([label(doc(V28)), label(doc(V211)), label(doc(V213))])
    assert new["runs"][label(doc(V28))] == old["runs"][label(doc(V28))]


@pytest.mark.parametrize("mutate, message", [
    (lambda b: b.update(schema_version=2), "schema_version 2"),
    (lambda b: b.update(kind="syncguard-session"), "kind is 'syncguard-session'"),
    (lambda b: b.pop("runs"), "'runs' is missing"),
    (lambda b: b["runs"]["torch 2.8.0+cu128 · NVIDIA H200"][DECL].update(state="weird"), "malformed entry"),
])
def test_bad_baseline_is_refused(mutate, message):
    base = mx.make_baseline(build(doc(V28)))
    mutate(base)
    with pytest.raises(SchemaError, match=message):
        mx.check_baseline(base)


def test_markdown_has_table_changes_comparison_and_measurements():
    d28, d211 = doc(V28), doc(V211)
    entry(d211, ROWS)["nodeid"] = ROWS[:-1] + "|pipe]"  # parametrize ids may hold a pipe
    m = build(d28, d211)
    md = render_markdown(m, mx.compare(m, mx.make_baseline(build(doc(V28)))))
    lines = md.splitlines()
    header = f"| case | {label(d28)} | {label(d211)} |"
    assert header in lines and lines[lines.index(header) + 1] == "|---|---|---|"
    assert f"| `{NOSYNC}` | failed + 1 sync (stream_sync) | clean |" in lines
    assert "| `cases/test_merge.py::test_no_sync[index_copy_rows\\|pipe]` | missing | clean |" in lines
    assert "### Changes between versions" in lines
    assert any(line.startswith(f"- `{DECL}` (NVIDIA H200): allowed 2 (pageable_copy, stream_sync) on 2.8.0")
               for line in lines)
    assert f"- {label(d211)}" in lines  # new run, under the baseline section
    assert "### Measurements" in lines
    rows = lines[lines.index(header) + 2:lines.index("### Changes between versions") - 1]
    assert len(rows) == len(m.nodeids)
    assert all(len(re.findall(r"(?<!\\)\|", row)) == 4 for row in rows)  # 3 columns, pipes escaped


def test_json_matrix_is_machine_readable():
    m = build(doc(V28), doc(V211))
    data = to_json(m, None)
    assert data["kind"] == "syncguard-matrix" and data["baseline"] is None
    case = next(c for c in data["cases"] if c["nodeid"] == NOSYNC)
    assert case["cells"][label(doc(V28))]["kinds"] == ["stream_sync"]
    assert case["cells"][label(doc(V211))]["state"] == "clean"
