"""The run matrix over checked-in session reports (tests/fixtures/reports: recorded shapes of H200
runs on torch 2.8.0 and 2.11.0 and a CPU run on 2.13.0; no GPU is used here)."""
from __future__ import annotations

import copy
import re
import statistics
from pathlib import Path

import pytest

from syncguard.reporting import baseline as bl
from syncguard.reporting import matrix as mx
from syncguard.reporting import timing
from syncguard.records.events import RaceEvent, SchemaError, SyncEvent
from syncguard.reporting.formats import render_markdown, to_json
from syncguard.reporting.sessionfile import TestEntry, load_document

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


def test_a_nodeid_twice_in_one_report_is_refused_naming_it():
    """Why: the second entry silently replaced the first, and with it its syncs."""
    d = doc(V211)
    d["tests"].append({**entry(d, DECL), "outcome": "passed", "audit": "clean"})
    with pytest.raises(SchemaError, match=re.escape(
            "r0.json: test 'cases/test_merge.py::test_declared_sync[index_put_cpu_mask]' "
            "appears twice")):
        build(d)


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
    base = bl.check(bl.make(m))
    assert base["runs"][label(doc(V28))][NOSYNC] == {
        "state": "failed", "audited": True, "syncs": 1, "kinds": ["stream_sync"], "allowed": 0,
        "allowed_kinds": [], "budget": {},
        "sync_sites": {"cudaStreamSynchronize in merge_cpu_mask (test_merge.py)": 1}}
    assert base["runs"][label(doc(V28))][DECL]["budget"] == {
        "cudaMemcpyAsync in merge_cpu_mask (test_merge.py)": 1,
        "cudaStreamSynchronize in merge_cpu_mask (test_merge.py)": 1}
    assert ROWS not in base["runs"][label(doc(V28))]  # missing cells are not accepted outcomes
    assert quiet(bl.compare(m, base))


def test_new_sync_or_race_on_a_clean_case_is_a_regression():
    d = doc(V211)
    base = bl.make(build(d))
    ev = SyncEvent(api="cudaStreamSynchronize", kind="stream_sync", op="aten::nonzero",
                   filename="cases/test_merge.py", lineno=41)
    entry(d, DECL).update(audit="syncs", syncs=[ev.to_dict()])
    entry(d, ROWS)["races"] = [RaceEvent(kind="race", what="host write to pinned buffer").to_dict()]
    cmp = bl.compare(build(d), base)
    why = {r.nodeid: r.why for r in cmp.regressions}
    assert why == {DECL: "syncs 0 -> 1; new kind stream_sync; unallowed syncs at "
                         "cudaStreamSynchronize in ? (test_merge.py): 1 > baseline 0",
                   ROWS: "syncs 0 -> 1; new kind race; unallowed syncs at race in ?: 1 > baseline 0"}
    assert cmp.improvements == ()


def test_more_syncs_new_kind_and_failing_are_regressions_fewer_is_an_improvement():
    d28 = doc(V28)
    base = bl.make(build(d28))
    worse, better = copy.deepcopy(d28), copy.deepcopy(d28)
    extra = SyncEvent(api="cudaMemcpy", kind="blocking_copy_d2h", op="aten::item").to_dict()
    entry(worse, NOSYNC)["syncs"].append(extra)
    entry(worse, SCATTER)["outcome"] = "failed"
    entry(better, NOSYNC).update(outcome="passed", audit="clean", syncs=[])
    cmp = bl.compare(build(worse), base)
    assert {r.nodeid: r.why for r in cmp.regressions} == {
        NOSYNC: "syncs 1 -> 2; new kind blocking_copy_d2h; unallowed syncs at cudaMemcpy in ?: "
                "1 > baseline 0", SCATTER: "now fails"}
    cmp = bl.compare(build(better), base)
    assert cmp.regressions == ()
    why = "no longer fails; syncs 1 -> 0; no more stream_sync"
    assert [(d.nodeid, d.before, d.after, d.why) for d in cmp.improvements] == [
        (NOSYNC, "failed + 1 sync (stream_sync)", "clean", why)]


def test_unaudited_cells_never_count_for_sync_behaviour():
    """A case not audited in the baseline and not audited now is not judged for syncs (a CPU
    run); a failure still counts. The GPU run is there so that something was audited."""
    cpu, gpu = doc(V213), doc(V211)
    base = bl.make(build(cpu, gpu))
    assert quiet(bl.compare(build(cpu, gpu), base))
    entry(cpu, ROWS)["outcome"] = "failed"  # a failure still counts on a CPU run
    assert [r.nodeid for r in bl.compare(build(cpu, gpu), base).regressions] == [ROWS]


def test_runs_and_cases_outside_the_baseline_are_new_not_regressions():
    d28, d211 = doc(V28), doc(V211)
    base = bl.make(build(d28))
    del base["runs"][label(d28)][SCATTER]
    cmp = bl.compare(build(d28, d211, doc(V213)), base)
    assert cmp.regressions == () and cmp.improvements == ()
    assert cmp.new_runs == (label(d211), label(doc(V213)))
    assert [(d.nodeid, d.after) for d in cmp.new_cases] == [(SCATTER, "clean")]


def test_a_new_case_with_an_unallowed_sync_is_a_regression_in_any_mode():
    """Record and warn modes fail no test: a new test that syncs had only been listed as new."""
    d28 = doc(V28)
    base = bl.make(build(d28))
    del base["runs"][label(d28)][SCATTER]
    e = entry(d28, SCATTER)
    e.update(audit="syncs", syncs=[_allowed("brand_new_loop")])
    (d,) = bl.compare(build(d28), base).regressions
    assert (d.nodeid, d.before, d.why) == (SCATTER, "not in baseline",
                                           "a new case with 1 unallowed sync(s)")
    assert bl.compare(build(d28), base).new_cases == ()


# -- the gate's holes, each one tripped (synthetic documents: the fixtures, changed here) -------

def quiet(cmp: bl.Comparison) -> bool:
    """Nothing to report: no regression, improvement, new or missing run or case."""
    return not (cmp.regressions or cmp.improvements or cmp.new_runs or cmp.new_cases
                or cmp.missing)


def _allowed(function: str, api: str = "cudaStreamSynchronize") -> dict:
    return SyncEvent(api=api, kind="stream_sync", filename="cases/test_merge.py", lineno=7,
                     function=function).to_dict()


def test_more_allowed_syncs_at_a_site_than_its_budget_is_a_regression():
    d = doc(V28)
    base = bl.make(build(d))
    grown, moved, fewer = copy.deepcopy(d), copy.deepcopy(d), copy.deepcopy(d)
    entry(grown, DECL)["allowed"].append(_allowed("merge_cpu_mask"))  # same site, one more
    entry(moved, DECL)["allowed"][1] = _allowed("elsewhere")  # same count, another site
    entry(fewer, DECL)["allowed"].pop()
    site = "cudaStreamSynchronize in merge_cpu_mask (test_merge.py)"
    cmp = bl.compare(build(grown), base)
    assert [(r.nodeid, r.why) for r in cmp.regressions] == [
        (DECL, f"allowed syncs at {site}: 2 > budget 1")]
    why = bl.compare(build(moved), base).regressions[0].why
    assert "allowed syncs at cudaStreamSynchronize in elsewhere (test_merge.py): 1 > budget 0" in why
    cmp = bl.compare(build(fewer), base)
    assert cmp.regressions == () and [r.nodeid for r in cmp.improvements] == [DECL]


@pytest.mark.parametrize("now", ["skipped", "not_audited", "off", "missing"])
def test_an_audited_case_that_is_no_longer_audited_is_a_regression(now):
    d = doc(V211)
    base = bl.make(build(d))
    if now == "missing":
        d["tests"] = [t for t in d["tests"] if t["nodeid"] != DECL]
    elif now == "skipped":
        entry(d, DECL).update(outcome="skipped", audit="off", allowed=[])
    else:
        entry(d, DECL).update(audit=now, allowed=[], reason="no CUDA")
    cmp = bl.compare(build(d), base)
    assert [(r.nodeid, r.why) for r in cmp.regressions] == [
        (DECL, f"was audited, now {now.replace('_', ' ')}")]


CUDA_DECL = "cases/test_merge.py::test_declared_sync[index_put_cuda_mask]"


def test_an_allowed_sync_changing_kind_at_its_site_is_a_regression():
    """Why: ``allowed_kinds`` was stored but never compared; same API, function and count kept
    the budget whole."""
    d = doc(V28)
    base = bl.make(build(d))
    entry(d, CUDA_DECL)["allowed"][0]["kind"] = "blocking_copy_d2h"
    cmp = bl.compare(build(d), base)
    assert [(r.nodeid, r.why) for r in cmp.regressions] == [
        (CUDA_DECL, "new allowed kind blocking_copy_d2h")]


def test_an_unallowed_sync_moving_to_another_site_is_a_regression():
    """Why: only the count and the kinds of unallowed syncs were kept, so one moving to a new
    site with the same count and kind passed."""
    d = doc(V28)
    base = bl.make(build(d))
    entry(d, NOSYNC)["syncs"][0]["function"] = "elsewhere"
    cmp = bl.compare(build(d), base)
    assert [(r.nodeid, r.why) for r in cmp.regressions] == [
        (NOSYNC, "unallowed syncs at cudaStreamSynchronize in elsewhere (test_merge.py): "
                 "1 > baseline 0")]
    del base["runs"][label(d)][NOSYNC]["sync_sites"]  # an older baseline: not judged, read
    assert bl.compare(build(d), bl.check(base)).regressions == ()


@pytest.mark.parametrize("before", ["skipped", "not_audited", "off"])
def test_a_case_not_judged_in_the_baseline_now_syncing_is_a_regression(before):
    """Why: a case the baseline did not judge was dropped from the comparison, so in record
    mode (the test passes) its new unallowed syncs passed the gate. Audited clean: nothing."""
    d = doc(V211)
    if before == "skipped":
        entry(d, SCATTER).update(outcome="skipped", audit="off")
    else:
        entry(d, SCATTER).update(audit=before, reason="no CUDA")
    base = bl.make(build(d))
    entry(d, SCATTER).update(outcome="passed", audit="clean", reason=None)
    assert bl.compare(build(d), base).regressions == ()
    entry(d, SCATTER).update(audit="syncs", syncs=[SyncEvent(
        api="cudaStreamSynchronize", kind="stream_sync", filename="cases/test_merge.py",
        lineno=7, function="merge").to_dict()])
    cmp = bl.compare(build(d), base)
    assert [(r.nodeid, r.why) for r in cmp.regressions] == [
        (SCATTER, f"not judged in the baseline ({before.replace('_', ' ')}), now 1 unallowed "
                  "sync(s)")]


@pytest.mark.parametrize("now", ["skipped", "off", "missing"])
def test_a_failed_case_that_was_audited_and_is_no_longer_audited_is_a_regression(now):
    """Why: the baseline stored the state "failed" alone, which lost that the case was audited."""
    d = doc(V28)
    base = bl.make(build(d))
    assert base["runs"][label(d)][NOSYNC]["audited"] is True
    if now == "missing":
        d["tests"] = [t for t in d["tests"] if t["nodeid"] != NOSYNC]
    else:
        entry(d, NOSYNC).update(outcome="skipped" if now == "skipped" else "passed", audit="off",
                                syncs=[])
    cmp = bl.compare(build(d), base)
    assert [(r.nodeid, r.why) for r in cmp.regressions] == [(NOSYNC, f"was audited, now {now}")]


def test_xfailed_counts_as_failed_for_the_gate_and_xpassed_as_passed():
    """Why: xfailed counted as passed, and a passing test that now xfails stopped its audit
    early (at the expected failure) and saw less."""
    d = doc(V211)
    base = bl.make(build(d))
    entry(d, SCATTER)["outcome"] = "xfailed"
    cmp = bl.compare(build(d), base)
    assert [(r.nodeid, r.why) for r in cmp.regressions] == [(SCATTER, "now fails")]
    assert bl.make(build(d))["runs"][label(d)][SCATTER]["state"] == "failed"
    assert quiet(bl.compare(build(d), bl.make(build(d))))  # xfailed in both: the same
    entry(d, SCATTER)["outcome"] = "xpassed"  # it ran to its end
    assert quiet(bl.compare(build(d), base))


def test_a_gated_timing_no_longer_measured_is_a_regression():
    """Why: a timing gated in the baseline that the new run did not measure (its samples gone,
    or too few processes or repetitions) silently stopped being gated."""
    d = doc(V211)
    _samples(d, SCATTER, [[1.0, 1.01, 0.99, 1.0, 1.02], [1.02, 1.03, 1.01, 1.02, 1.02]])
    base = bl.make(build(d))
    del entry(d, SCATTER)["measurements"]["samples"]
    cmp = bl.compare(build(d), base)
    assert [(r.nodeid, r.why) for r in cmp.regressions] == [
        (SCATTER, "gated timing median_ms no longer measured")]
    _samples(d, SCATTER, [[1.0, 1.01, 0.99, 1.0, 1.02]])  # one process
    cmp = bl.compare(build(d), base)
    assert [(r.nodeid, r.why) for r in cmp.regressions] == [
        (SCATTER, "gated timing median_ms no longer measured enough to gate (processes × reps: "
                  "1 × 5; gating needs 2 × 5)")]


CUPTI = "cuda: CUPTI callbacks on the CUDA runtime and driver (C callback)"


def test_a_run_whose_detectors_fell_back_is_a_whole_run_regression():
    """Why: a fallback sees fewer syncs, and the baseline kept no record of what a run could
    see, so the run passed as an improvement."""
    d = doc(V211)
    d["provenance"]["detectors_ran"] = CUPTI
    base = bl.make(build(d))
    assert base["provenance"][label(d)] == {"detectors": "cuda", "scope": None,
                                            "code": "fixture-detector-code"}
    d["provenance"]["detectors_ran"] = "debug,trace: cuda detector not used (no libcupti)"
    entry(d, CUDA_DECL).update(audit="clean", allowed=[])  # what the fallback did not see
    cmp = bl.compare(build(d), base)
    assert [(r.label, r.nodeid, r.before, r.after, r.why) for r in cmp.regressions] == [
        (label(d), bl.WHOLE_RUN, "cuda", "debug,trace", "detectors cuda -> debug,trace")]
    # without detectors_ran (older reports) the detectors asked for stand in
    del d["provenance"]["detectors_ran"]
    assert [r.why for r in bl.compare(build(d), base).regressions] == [
        "detectors cuda -> debug,trace"]


# -- which detectors judged each test (a fallback of one test's region) -------------------------

def with_test_detectors(d: dict, names: list[str]) -> dict:
    """The fixture (version 1: no per-test detectors) as a report of session schema 4 has it:
    each audited test names the detectors that judged it."""
    for t in d["tests"]:
        if t["audit"] in ("clean", "syncs", "allowed"):
            t["detectors"] = list(names)
    d["schema_version"] = 4
    return d


def test_one_test_judged_by_weaker_detectors_than_the_baseline_is_a_regression():
    """Why: a test whose region fell back to debug,trace while the rest of the run kept cuda saw
    fewer syncs; the run's provenance still said cuda, so its clean result passed."""
    d = with_test_detectors(doc(V211), ["cuda"])
    d["provenance"]["detectors_ran"] = CUPTI
    base = bl.make(build(d))
    assert base["runs"][label(d)][CUDA_DECL]["detectors"] == ["cuda"]
    fell_back = "debug,trace: cuda detector not used (CUPTI held by another subscriber)"
    entry(d, CUDA_DECL).update(audit="clean", allowed=[], detectors=["debug", "trace"],
                               detector_reason=fell_back)  # what the fallback did not see
    entry(d, NOSYNC).update(detectors=["debug", "trace"], detector_reason=fell_back)  # still clean
    cmp = bl.compare(build(d), base)
    assert [(r.label, r.nodeid, r.before, r.after, r.why) for r in cmp.regressions] == [
        (label(d), CUDA_DECL, "allowed 1 (stream_sync)", "clean", "detectors cuda -> debug,trace"),
        (label(d), NOSYNC, "clean", "clean", "detectors cuda -> debug,trace")]
    assert cmp.improvements == () and cmp.notes == ()


def test_the_same_detectors_in_another_order_are_no_regression():
    d = with_test_detectors(doc(V211), ["debug", "trace", "profile"])
    base = bl.make(build(d))
    entry(d, NOSYNC)["detectors"] = ["profile", "trace", "debug"]
    cmp = bl.compare(build(d), base)
    assert quiet(cmp) and cmp.notes == ()


def test_without_per_test_detectors_the_gate_says_it_did_not_compare_them():
    """Why: a report or baseline written before per-test detectors has nothing to compare; the
    gate must say so, not pass as if they were the same."""
    old = doc(V211)  # version 1: no test names its detectors
    new = with_test_detectors(copy.deepcopy(old), ["cuda"])
    no_report = (f"report(s) without per-test detectors (written before session schema 4): which "
                 f"detectors judged each test not compared for {label(old)} (6 case(s)); write the "
                 "report again with this syncguard")
    no_baseline = (f"baseline case(s) without per-test detectors (an older baseline): which "
                   f"detectors judged each test not compared for {label(old)} (6 case(s)); rewrite "
                   "it with --update-baseline")
    old_base = bl.check(bl.make(build(old)))
    assert "detectors" not in old_base["runs"][label(old)][NOSYNC]
    cmp = bl.compare(build(old), old_base)
    assert cmp.regressions == () and cmp.notes == (no_baseline, no_report)
    cmp = bl.compare(build(new), old_base)
    assert cmp.regressions == () and cmp.notes == (no_baseline,)
    cmp = bl.compare(build(old), bl.make(build(new)))
    assert cmp.regressions == () and cmp.notes == (no_report,)
    # a test not audited on either side has no detectors to compare: nothing to say
    cpu = doc(V213)
    assert bl.compare(build(cpu, new), bl.make(build(cpu, new))).notes == ()


def test_update_diff_lists_a_test_judged_by_other_detectors():
    d = with_test_detectors(doc(V211), ["cuda"])
    old = bl.make(build(doc(V211)))  # an older baseline: no per-test detectors
    new = bl.make(build(d))
    assert f"~ {NOSYNC} on {label(d)}: detectors unknown -> cuda" in bl.diff(old, new)
    entry(d, NOSYNC)["detectors"] = ["debug", "trace"]
    assert bl.diff(new, bl.make(build(d))) == [
        f"~ {NOSYNC} on {label(d)}: detectors cuda -> debug,trace"]


def test_a_narrower_code_scope_is_a_whole_run_regression():
    """Why: syncs moved outside the scope never reach a case, and passed as an improvement."""
    d = doc(V28)
    d["options"]["scope"] = "cases/ (default; test files and conftest.py outside)"
    base = bl.make(build(d))
    d["options"]["scope"] = "cases/other/"
    entry(d, NOSYNC).update(outcome="passed", audit="clean", syncs=[])  # now outside
    cmp = bl.compare(build(d), base)
    assert [(r.nodeid, r.why) for r in cmp.regressions] == [
        (bl.WHOLE_RUN, "code scope cases/ (default; test files and conftest.py outside) -> "
                       "cases/other/")]


def test_an_incomplete_run_is_a_whole_run_regression():
    d = doc(V211)
    base = bl.make(build(d))
    d["complete"] = False
    cmp = bl.compare(build(d), base)
    assert [(r.nodeid, r.why) for r in cmp.regressions] == [
        (bl.WHOLE_RUN, "run incomplete: its report says complete: false (the session ended "
                       "before its tests did)")]


def test_a_baseline_without_run_records_is_read_and_says_what_it_does_not_compare():
    d = with_test_detectors(doc(V211), ["cuda"])
    base = bl.make(build(d))
    del base["provenance"]  # older than run records, and than per-test detectors
    for e in base["runs"][label(d)].values():
        del e["detectors"]
    d["provenance"]["detectors_ran"] = "debug,trace: cuda detector not used (no libcupti)"
    d["provenance"]["syncguard"]["code"] = "other-code"
    cmp = bl.compare(build(d), bl.check(base))
    assert cmp.regressions == () and bl.other_code(build(d), base) == []
    assert cmp.notes == (
        f"baseline run(s) without a provenance record (an older baseline): detectors, code "
        f"scope and detector code not compared for {label(d)}; rewrite it with --update-baseline",
        f"baseline case(s) without per-test detectors (an older baseline): which detectors "
        f"judged each test not compared for {label(d)} (6 case(s)); rewrite it with "
        "--update-baseline")


def test_a_baseline_run_left_off_the_inputs_is_a_regression():
    base = bl.make(build(doc(V28), doc(V211)))
    cmp = bl.compare(build(doc(V211)), base)
    assert [(r.label, r.nodeid, r.after) for r in cmp.regressions] == [
        (label(doc(V28)), bl.WHOLE_RUN, "absent from the inputs")]


def test_zero_audited_cases_is_a_regression():
    cpu = doc(V213)
    base = bl.make(build(cpu))
    cmp = bl.compare(build(cpu), base)
    assert [r.why for r in cmp.regressions] == [
        "zero audited cases: nothing was checked (a CPU run checks no sync)"]
    for t in cpu["tests"]:  # every case skipped: the same hole
        t.update(outcome="skipped")
    assert len(bl.compare(build(cpu), base).regressions) == 1


def test_a_missing_case_never_audited_is_listed_not_judged():
    cpu, gpu = doc(V213), doc(V211)
    base = bl.make(build(cpu, gpu))
    cpu["tests"] = [t for t in cpu["tests"] if t["nodeid"] != DECL]
    cmp = bl.compare(build(cpu, gpu), base)
    assert cmp.regressions == () and [d.nodeid for d in cmp.missing] == [DECL]


def test_update_diff_lists_what_it_accepts():
    d = doc(V28)
    old = bl.make(build(d))
    entry(d, DECL)["allowed"].append(_allowed("merge_cpu_mask"))
    new = bl.make(build(d, doc(V211)), old)
    lines = bl.diff(old, new)
    assert f"+ run {label(doc(V211))} ({len(new['runs'][label(doc(V211))])} cases)" in lines
    changed = [x for x in lines if x.startswith(f"~ {DECL} on {label(d)}")]
    assert len(changed) == 1 and "allowed 2 (pageable_copy, stream_sync) -> allowed 3" in changed[0]
    assert "budget" in changed[0]
    assert bl.diff(new, new) == []


def test_old_baseline_without_budgets_and_a_session_report_are_refused_in_words():
    base = bl.make(build(doc(V28)))
    for e in base["runs"][label(doc(V28))].values():
        del e["budget"]
    with pytest.raises(SchemaError, match="no valid per-site 'budget'.*--update-baseline"):
        bl.check(base)
    with pytest.raises(SchemaError, match="is a session report, not a baseline"):
        bl.check(doc(V28))


# -- timings: gated only beyond a measured noise band -----------------------------------------

def _samples(d: dict, nodeid: str, per_process: list[list[float]]) -> None:
    entry(d, nodeid)["measurements"] = {"median_ms": statistics.median(per_process[0]),
                                        "samples": {"median_ms": per_process}}


def test_timing_beyond_the_measured_noise_band_is_a_regression_and_states_its_threshold():
    d = doc(V211)
    _samples(d, SCATTER, [[1.00, 1.01, 0.99, 1.00, 1.02], [1.02, 1.03, 1.01, 1.02, 1.02]])
    base = bl.make(build(d))
    assert base["runs"][label(d)][SCATTER]["timing"]["median_ms"]["processes"] == 2
    slow, close = copy.deepcopy(d), copy.deepcopy(d)
    _samples(slow, SCATTER, [[1.30, 1.31, 1.29, 1.30, 1.30], [1.31, 1.30, 1.32, 1.31, 1.30]])
    _samples(close, SCATTER, [[1.02, 1.03, 1.01, 1.02, 1.02], [1.03, 1.02, 1.04, 1.03, 1.03]])
    cmp = bl.compare(build(slow), base)
    assert [r.nodeid for r in cmp.regressions] == [SCATTER]
    assert "slower beyond the noise band (threshold ×" in cmp.regressions[0].why
    assert any("threshold ×" in t and "2 processes × 5 reps" in t for t in cmp.timings)
    cmp = bl.compare(build(close), base)
    assert cmp.regressions == () and "within the noise band" in cmp.timings[0]


def test_timings_without_repetitions_are_shown_but_never_gated():
    d = doc(V211)
    _samples(d, SCATTER, [[1.0, 1.0, 1.0, 1.0, 1.0]])  # one process: no band can be measured
    base = bl.make(build(d))
    assert "timing" not in base["runs"][label(d)][SCATTER]
    _samples(d, SCATTER, [[10.0, 10.0, 10.0, 10.0, 10.0]])
    entry(d, SCATTER)["measurements"]["median_ms"] = 10.0
    cmp = bl.compare(build(d), base)
    assert cmp.regressions == () and cmp.ungated_timings >= 1
    md = render_markdown(build(d), cmp)
    assert "shown but not gated" in md and "10.00 ms" in md


def test_noise_band_is_the_spread_of_process_medians():
    b = timing.band(((1.0, 1.0, 1.0, 1.0, 1.0), (1.1, 1.1, 1.1, 1.1, 1.1)))
    assert (b.processes, b.reps, b.gateable) == (2, 5, True)
    assert b.median == pytest.approx(1.05) and b.band == pytest.approx(0.05 / 1.05)
    assert timing.threshold(b, b) == pytest.approx(1 + 4 * 0.05 / 1.05)
    assert not timing.band(((1.0,) * 4, (1.0,) * 4)).gateable  # too few repetitions


def test_noise_band_is_floored_by_the_spread_within_a_process():
    """Why: two processes with the same median had a band of 0, and a 0.2 % change was gated as
    a regression although each process's own repetitions moved by ±2 %."""
    reps = (0.98, 0.99, 1.00, 1.01, 1.02)  # median 1.00, median absolute deviation 0.01
    b = timing.band((reps, reps))
    assert b.median == pytest.approx(1.0) and b.band == pytest.approx(0.01)
    assert timing.threshold(b, b) == pytest.approx(1.04)
    d = doc(V211)
    _samples(d, SCATTER, [list(reps), list(reps)])
    base = bl.make(build(d))
    _samples(d, SCATTER, [[x * 1.002 for x in reps]] * 2)
    cmp = bl.compare(build(d), base)
    assert cmp.regressions == () and "within the noise band" in cmp.timings[0]
    _samples(d, SCATTER, [[x * 1.10 for x in reps]] * 2)  # 10 %: beyond ±1 % + ±1 %, doubled
    assert [r.nodeid for r in bl.compare(build(d), base).regressions] == [SCATTER]


# -- provenance ---------------------------------------------------------------------------------

def test_runs_from_other_detector_code_or_without_provenance_are_mixed_and_marked():
    d28, d211, cpu = doc(V28), doc(V211), doc(V213)
    assert mx.mixed_runs(build(d28, d211, cpu)) == []
    d211["provenance"]["syncguard"]["code"] = "other-code"
    del cpu["provenance"]
    m = build(d28, d211, cpu)
    assert {r.label for r in mx.mixed_runs(m)} == {label(d211), label(cpu)}
    md = render_markdown(m)
    lines = md.splitlines()
    assert f"| case | {label(d28)} | {label(d211)} † | {label(cpu)} † |" in lines
    assert any(x.startswith("> † made by other detector code") for x in lines)
    assert "| project commit | 0123456789 | 0123456789 | unknown (no provenance) |" in lines
    assert any("A CPU run checks no sync" in x for x in lines)
    assert mx.mixed_runs(build(cpu)) == []  # one run is compared with nothing


def test_update_keeps_runs_not_in_the_update():
    old = bl.make(build(doc(V28), doc(V211)))
    new = bl.make(build(doc(V213)), old)
    assert list(new["runs"]) == sorted([label(doc(V28)), label(doc(V211)), label(doc(V213))])
    assert new["runs"][label(doc(V28))] == old["runs"][label(doc(V28))]


@pytest.mark.parametrize("mutate, message", [
    (lambda b: b.update(schema_version=2), "schema_version 2"),
    (lambda b: b.update(kind="syncguard-session"), "is a session report, not a baseline"),
    (lambda b: b.update(kind="other"), "kind is 'other'"),
    (lambda b: b.pop("runs"), "'runs' is missing"),
    (lambda b: b["runs"]["torch 2.8.0+cu128 · NVIDIA H200"][DECL].update(state="weird"), "malformed entry"),
    (lambda b: b["runs"]["torch 2.8.0+cu128 · NVIDIA H200"][DECL].update(detectors="cuda"),
     re.escape(f"entry for {DECL!r} in run 'torch 2.8.0+cu128 · NVIDIA H200': 'detectors' is "
               "'cuda', not a list of detector names")),
    (lambda b: b["runs"]["torch 2.8.0+cu128 · NVIDIA H200"][DECL].update(detectors=[1]),
     re.escape("'detectors' is [1], not a list of detector names")),
])
def test_bad_baseline_is_refused(mutate, message):
    base = bl.make(build(doc(V28)))
    mutate(base)
    with pytest.raises(SchemaError, match=message):
        bl.check(base)


def test_markdown_has_table_changes_comparison_and_measurements():
    d28, d211 = doc(V28), doc(V211)
    entry(d211, ROWS)["nodeid"] = ROWS[:-1] + "|pipe]"  # parametrize ids may hold a pipe
    m = build(d28, d211)
    md = render_markdown(m, bl.compare(m, bl.make(build(doc(V28)))), everything=True)
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
    rows = lines[lines.index(header) + 2:lines.index("### Provenance") - 1]
    assert len(rows) == len(m.nodeids)
    assert all(len(re.findall(r"(?<!\\)\|", row)) == 4 for row in rows)  # 3 columns, pipes escaped


def test_json_matrix_is_machine_readable():
    m = build(doc(V28), doc(V211))
    data = to_json(m, None)
    assert data["kind"] == "syncguard-matrix" and data["baseline"] is None
    case = next(c for c in data["cases"] if c["nodeid"] == NOSYNC)
    assert case["cells"][label(doc(V28))]["kinds"] == ["stream_sync"]
    assert case["cells"][label(doc(V211))]["state"] == "clean"


@pytest.mark.parametrize("band", [{"median": 10**400, "band": 0.1, "processes": 2, "reps": 5},
                                  {"median": 1.0, "band": 10**400, "processes": 2, "reps": 5}])
def test_a_baseline_timing_past_the_float_range_is_not_gated(band):
    """Why: Band.from_dict caught TypeError and ValueError, not the OverflowError of float() on
    an integer past 1e308: a baseline holding one gave a traceback instead of an ungated timing."""
    assert timing.Band.from_dict(band) is None
