"""The rules table against every committed GPU run: it must be exactly what the runs derive,
and predicting each run's torch on the CPU must reproduce what that run's ground truth
measured (whether a snippet syncs, its kinds, its line), for the corpus, the library corpus
and the cases corpus. Expected values come from the committed runs, never from the predictor."""
from __future__ import annotations

import os
import warnings

import pytest

from rulelearn.calibrate import calibrate_suite
from rulelearn.derive import (CAPTURE_WHY, CorpusRun, derive, load_runs,
                                      measured_events, normalise_op, run_snippets)
from syncguard.predict.predictor import Observation
from syncguard.predict.rules import load_rules

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUNS = load_runs(ROOT)


@pytest.fixture(scope="module")
def snippets():
    import predict_rules

    return predict_rules.snippets_and_states()


def test_the_committed_table_is_what_the_committed_runs_derive(capsys):
    import predict_rules

    assert {r.torch for r in RUNS} >= {"2.8.0", "2.11.0"}, "no committed atlas runs found"
    assert predict_rules.main(["check"]) == 0, capsys.readouterr().out


def test_the_table_names_the_runs_it_was_learned_from():
    paths = {s["path"] for s in load_rules().sources}
    assert paths == {r.path for r in RUNS}
    assert all(p.startswith("reports/atlas-runs/") for p in paths)


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.torch)
def test_every_committed_run_is_reproduced_on_the_cpu(run, snippets):
    from predict_calibrate import not_runnable

    cases, states = snippets
    warnings.filterwarnings("ignore", message="Sparse invariant checks")
    ran = run_snippets(cases, states, load_rules(), run.torch)
    skipped = {n.split("#", 1)[1].split(":", 1)[0] for n in load_rules().not_learned
               if n.startswith(os.path.basename(run.path) + "#")}
    by_name = {s["name"]: s for s in cases}
    compared = 0
    for suite in ("corpus", "library", "cases"):
        if not run.has(suite):
            continue
        cal = calibrate_suite(suite, cases, ran, run, run.torch, ROOT, not_runnable)
        for r in cal.rows:
            snip = by_name[r.name]
            if snip.get("capture"):  # never run on a CPU: reported, never clean
                assert any(CAPTURE_WHY in u for u in r.unmodelled) and not r.whether_ok
                continue
            if f"{snip['id']}" in skipped or not r.runnable_on_cpu:
                continue
            compared += 1
            assert r.whether_ok and r.kind_ok and r.line_ok is not False, \
                f"{snip['id']}: {r.disagreement()}"
    assert compared >= 30


def test_profiler_names_of_python_syncs_are_normalised():
    """2.14.1 recorded Python-level syncs by their bound-method repr (the stale op names)."""
    assert normalise_op("<built-in method synchronize of Stream object at 0x7f>") == \
        "torch.cuda.Stream.synchronize"
    assert normalise_op("<built-in function _cuda_emptyCache>") == "torch.cuda.empty_cache"
    assert normalise_op("aten::nonzero") == "aten::nonzero"


def test_a_snippet_whose_ground_truth_failed_is_not_learned_from():
    assert measured_events({"error": None, "truth": {"ok": False}}) is None
    assert measured_events({"error": "RuntimeError: x", "truth": {"ok": True}}) is None
    assert measured_events({"error": None, "line": 7, "truth": {"ok": True, "waits": [
        {"kind": "event_sync", "api": "cudaEventSynchronize", "op": None}]}}) == [
        {"kind": "event_sync", "api": "cudaEventSynchronize", "op": None, "line": 7}]


def _snip(name, line):
    return {"id": f"corpus/{name}", "name": name, "corpus": "corpus", "file": "x.py",
            "line": line}


def _truth(*ops):
    return {"error": None, "line": 0, "truth": {"ok": True, "waits": [
        {"kind": "blocking_copy_d2h", "api": "cudaMemcpyAsync+cudaStreamSynchronize", "op": op}
        for op in ops]}}


def test_two_runs_of_one_torch_disagreeing_on_a_key_is_a_conflict():
    """Plumbing with a made-up run (no GPU data): one key, clean in one snippet and syncing in
    another, must be reported, not silently resolved."""
    a, b = _snip("a", 10), _snip("b", 20)
    run = CorpusRun("fake.json", "2.11.0", {}, {"corpus/a": _truth("aten::sum"),
                                                "corpus/b": _truth()})
    calls = {"corpus/a": [Observation("aten::sum", (), "x.py", 10, "unmodelled")],
             "corpus/b": [Observation("aten::sum", (), "x.py", 20, "unmodelled")]}
    d = derive([run], [a, b], calls)
    assert any("aten::sum[]" in c for c in d.conflicts), d.conflicts


def test_waits_are_shared_out_to_calls_of_their_op_and_a_count_mismatch_is_not_learned():
    """Plumbing with a made-up run: two measured .item() waits and two recorded calls give one
    sync per call; three waits for two calls teach nothing and say why."""
    s = _snip("a", 10)
    obs = [Observation("aten::_local_scalar_dense", (), "x.py", 10, "unmodelled")] * 2
    two = CorpusRun("two.json", "2.11.0", {}, {"corpus/a": _truth(*["aten::_local_scalar_dense"] * 2)})
    d = derive([two], [s], {"corpus/a": obs})
    assert len(d.table.rules["aten::_local_scalar_dense[]"]["torch"]["2.11.0"]["syncs"]) == 1
    three = CorpusRun("three.json", "2.11.0", {}, {"corpus/a": _truth(*["aten::_local_scalar_dense"] * 3)})
    d = derive([three], [s], {"corpus/a": obs})
    assert not d.table.rules and "3 measured wait(s)" in d.table.not_learned[0]


def test_a_call_made_below_the_snippets_line_is_attributed_to_it():
    """A merge variant's ops run in cases/merge.py, called from the snippet's line."""
    s = _snip("a", 10)
    run = CorpusRun("fake.json", "2.11.0", {}, {"corpus/a": _truth("aten::nonzero")})
    o = Observation("aten::index_put_", (("mask", "cuda"),), "merge.py", 99, "unmodelled",
                    stack=("merge.py:99 in f", "x.py:10 in a"))
    d = derive([run], [s], {"corpus/a": [o]})
    rule = d.table.rules["aten::index_put_[mask=cuda]"]["torch"]["2.11.0"]
    assert rule["syncs"] == [{"kind": "blocking_copy_d2h", "api": "cudaStreamSynchronize",
                              "via": "aten::nonzero"}]


def test_the_prediction_doc_quotes_the_committed_calibration():
    """docs/prediction.md's figures are the committed calibration's, not typed from memory."""
    import json

    with open(os.path.join(ROOT, "reports", "predict", "calibration.json")) as f:
        nearest = {c["stats"]["suite"]: c["stats"] for c in json.load(f)["nearest"]}
    with open(os.path.join(ROOT, "docs", "prediction.md")) as f:
        readme = " ".join(f.read().split())

    def pct(pair):
        return f"{pair[0]}/{pair[1]} ({100.0 * pair[0] / pair[1]:.1f}%)"

    total = nearest["all three suites together"]
    held = nearest["all suites, each snippet held out of the rules"]
    assert f"whether it syncs {pct(total['whether'])}" in readme
    assert f"exact kind {pct(total['kind'])}" in readme
    assert f"line {pct(total['line'])}" in readme
    assert f"{total['crashes']} crashes" in readme
    assert f"Held out (each snippet's rules derived without it): {pct(held['whether'])}" in readme
