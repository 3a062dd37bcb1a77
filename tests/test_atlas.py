"""The sync atlas, the alternatives table and the corpus runner's plumbing, on the CPU.

GPU behaviour is not proven here: the runner's trace reading is fed fake profiler events shaped
like torch's ``FunctionEvent`` (plumbing only), and the atlas is rendered from committed runs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from syncguard.records import alternatives
from syncguard.atlas import render as atlas
from syncguard import cli

ROOT = Path(__file__).resolve().parent.parent
RUNS = sorted(ROOT.glob("reports/atlas-runs/*.json"))
import corpus_report as cr  # noqa: E402


# ---------------------------------------------------------------------------------------------
# The committed atlas

def test_committed_atlas_regenerates_byte_for_byte():
    assert RUNS, "no committed corpus runs under reports/atlas-runs/"
    built = atlas.build((str(p), atlas.load_run(str(p))) for p in RUNS)
    text = (ROOT / "reports" / "atlas.md").read_text(encoding="utf-8")
    assert atlas.render_markdown(built) == text, "reports/atlas.md is stale: run `nox -s atlas`"


def test_cli_writes_the_same_atlas(tmp_path):
    out = tmp_path / "atlas.md"
    assert cli.main(["atlas", *map(str, RUNS), "--format", "markdown", "--output", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == (ROOT / "reports" / "atlas.md").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# Building from runs (synthetic runs: plumbing)

def _run(torch_version: str, waits_by_id: dict, error_ids=()) -> dict:
    snippets = []
    for sid, waits in waits_by_id.items():
        snippets.append({"id": sid, "corpus": sid.split("/")[0], "doc": "",
                         "error": "warm-up: boom" if sid in error_ids else None,
                         "truth": {"ok": True, "waits": waits, "syncs": bool(waits)}})
    return {"schema": "syncguard-corpus-run", "schema_version": 2,
            "provenance": {"torch": torch_version, "gpu": "G", "driver": "1"},
            "summary": {}, "snippets": snippets}


H2D = {"kind": "blocking_copy_h2d", "direction": "h2d", "memory": "pageable",
       "api": "cudaMemcpyAsync+cudaStreamSynchronize", "op": "aten::copy_"}


def test_transition_is_said_in_words_with_the_measured_boundary():
    runs = [("b", _run("2.9.0", {"corpus/put": []})), ("a", _run("2.8.0", {"corpus/put": [H2D]}))]
    built = atlas.build(runs)
    assert [c.label for c in built.columns] == ["2.8.0", "2.9.0"]
    assert built.transitions == (
        "`corpus/put`: blocking_copy_h2d[h2d/pageable] up to 2.8.0 → sync-free from 2.9.0",)
    first, second = built.rows[0].cells
    assert not first.changed and second.changed
    assert second.text() == "◆ clean"
    assert first.text() == ("blocking_copy_h2d[h2d/pageable] · "
                            "cudaMemcpyAsync+cudaStreamSynchronize (aten::copy_)")


def test_unmeasured_and_failed_cells_do_not_make_transitions():
    runs = [("a", _run("2.8.0", {"library/x": [H2D]})),
            ("b", _run("2.9.0", {"library/x": [H2D]}, error_ids={"library/x"})),
            ("c", _run("2.10.0", {"library/y": []})),
            ("d", _run("2.11.0", {"library/x": [H2D, H2D]}))]
    built = atlas.build(runs)
    x = next(r for r in built.rows if r.id == "library/x")
    assert [c.text(mark=False) for c in x.cells][1:3] == ["not run: warm-up: boom", "–"]
    assert x.cells[3].changed  # against 2.8.0, the last measured cell
    assert built.transitions == ("`library/x`: blocking_copy_h2d[h2d/pageable] up to 2.8.0 → "
                                 "blocking_copy_h2d[h2d/pageable]×2 from 2.11.0",)


def test_host_memory_one_run_could_not_see_is_no_transition():
    """A converted run names no host memory ("/?"): only what both runs know is compared."""
    unknown = dict(H2D, memory=None)
    pinned = dict(H2D, memory="pinned")
    runs = [("a", _run("2.8.0", {"corpus/x": [unknown], "corpus/y": [unknown]})),
            ("b", _run("2.11.0", {"corpus/x": [pinned], "corpus/y": []}))]
    built = atlas.build(runs)
    assert built.transitions == (
        "`corpus/y`: blocking_copy_h2d[h2d/?] up to 2.8.0 → sync-free from 2.11.0",)
    runs = [("a", _run("2.8.0", {"corpus/x": [H2D]})), ("b", _run("2.11.0", {"corpus/x": [pinned]}))]
    assert atlas.build(runs).transitions  # both runs know the memory: pageable -> pinned is a change


def test_syncing_row_names_its_alternative_with_what_the_runs_measured():
    one_hot = {"kind": "blocking_copy_d2h", "direction": "d2h", "memory": "pinned",
               "api": "cudaMemcpyAsync+cudaStreamSynchronize", "op": "aten::_local_scalar_dense"}
    runs = [("a", _run("2.8.0", {"library/one_hot": [one_hot], "library/one_hot_num_classes": []})),
            ("b", _run("2.11.0", {"library/one_hot": [one_hot],
                                  "library/one_hot_num_classes": [one_hot]}))]
    md = atlas.render_markdown(atlas.build(runs))
    row = next(line for line in md.splitlines() if line.startswith("| `library/one_hot` "))
    assert row.endswith("| F.one_hot(labels, num_classes=C) — sync-free on 2.8.0; "
                        "still waits on 2.11.0 |")


def test_json_and_table_formats_carry_the_same_rows():
    runs = [("a", _run("2.8.0", {"corpus/put": [H2D]})), ("b", _run("2.9.0", {"corpus/put": []}))]
    built = atlas.build(runs)
    data = json.loads(atlas.render_json(built))
    assert data["schema"] == "syncguard-atlas" and data["schema_version"] == 1
    assert [c["changed"] for c in data["rows"][0]["cells"]] == [False, True]
    text = atlas.render(built, "table", to_terminal=False)
    assert "corpus/put" in text and "sync-free from 2.9.0" in text


@pytest.mark.parametrize("content, message", [
    ("{", "not valid JSON"),
    (json.dumps({"schema": "syncguard-session"}), "not a corpus run"),
    (json.dumps({"schema": "syncguard-corpus-run", "schema_version": 9}), "schema_version 9"),
])
def test_bad_runs_give_one_line_and_write_nothing(tmp_path, capsys, content, message):
    bad = tmp_path / "run.json"
    bad.write_text(content)
    out = tmp_path / "atlas.md"
    assert cli.main(["atlas", str(bad), "--format", "markdown", "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()


def test_merge_benchmarks_join_the_corpus_run_of_the_same_torch():
    bench = {"kind": "syncguard-merge-bench-split", "schema_version": 1,
             "environment": {"torch": "2.8.0", "gpu": "G"},
             "results": [{"variant": "index_put_cpu_mask", "tokens": 2048, "hidden": 2048,
                          "device_x_copy": {"median": 5.5, "min": 5.25, "max": 6.0},
                          "host_us": {"median": 40.2, "min": 38.0, "max": 55.9},
                          "peak_extra_bytes": 3 * 2**20}]}
    runs = [("c", _run("2.8.0", {"cases/merge_index_put_cpu_mask": [H2D]})),
            ("merge-split-2.8.0.json", bench)]
    built = atlas.build(runs)
    assert built.bench_columns == ("2.8.0 · G · `merge-split-2.8.0.json`",)
    (row,) = built.merges
    assert (row.variant, row.size) == ("index_put_cpu_mask", "2048x2048")
    assert row.cells == ("blocking_copy_h2d[h2d/pageable] · 5.50× copy [5.25–6.00] · "
                         "host 40 µs [38–56] · +3 MiB",)
    assert "| index_put_cpu_mask | 2048x2048 | blocking_copy_h2d" in atlas.render_markdown(built)


# ---------------------------------------------------------------------------------------------
# The alternatives table

def test_every_alternative_names_snippets_that_exist():
    from tests.gpu import corpus, library_corpus

    ids = ({f"corpus/{s.name}" for s in corpus.SNIPPETS}
           | {f"library/{s.name}" for s in library_corpus.LIBRARY}
           | {f"cases/{s.name}" for s in library_corpus.CASES})
    for alt in alternatives.ALTERNATIVES:
        assert set(alt.replaces) <= ids and alt.checked_by in ids, alt
        assert alt.checked_by not in alt.replaces


def test_hint_by_op_chain():
    chain = ("aten::one_hot", "aten::max", "aten::item", "aten::_local_scalar_dense")
    assert alternatives.hint(chain).startswith("sync-free alternative: F.one_hot(labels, num_classes=C)")
    assert alternatives.hint(("aten::item", "aten::_local_scalar_dense")) is None  # .item(): none
    assert alternatives.for_snippet("library/linalg_cholesky").checked_by == "library/linalg_cholesky_ex"
    assert alternatives.for_snippet("corpus/item") is None


# ---------------------------------------------------------------------------------------------
# The library corpus's shape

def test_library_corpus_has_forty_one_line_calls():
    from tests.gpu import library_corpus

    assert len(library_corpus.LIBRARY) >= 40
    names = [s.name for s in library_corpus.LIBRARY + library_corpus.CASES]
    assert len(names) == len(set(names))
    for s in library_corpus.LIBRARY + library_corpus.CASES:
        line = s.call_line
        assert line is not None, s.name
        text = Path(library_corpus.__file__).read_text().splitlines()[line - 1]
        assert text.rstrip().endswith("# CALL") or "# CALL  #" in text, s.name


# ---------------------------------------------------------------------------------------------
# The runner's reading of a profiler trace (fake FunctionEvents: plumbing only)

class _Ev(types.SimpleNamespace):
    pass


def _ev(name, start, end, parent=None, cid=0, device="CPU", thread=1):
    return _Ev(name=name, id=cid, device_type=f"DeviceType.{device}", cpu_parent=parent,
               thread=thread, time_range=types.SimpleNamespace(start=start, end=end), kernels=[])


def test_trace_reading_pairs_copies_with_their_sync():
    marker = _ev(cr.MARKER, 0, 100)
    put = _ev("aten::index_put_", 1, 50, marker)
    copy = _ev("aten::copy_", 60, 70, marker)
    events = [
        marker, put, copy,
        _ev("cudaMemcpyAsync", 2, 3, put, cid=11),
        _ev("Memcpy HtoD (Pageable -> Device)", 4, 5, cid=11, device="CUDA"),
        _ev("cudaStreamSynchronize", 6, 9, put, cid=12),
        _ev("cudaMemcpyAsync", 10, 11, put, cid=13),  # pinned, no sync after: no wait
        _ev("Memcpy HtoD (Pinned -> Device)", 12, 13, cid=13, device="CUDA"),
        _ev("cudaMemcpyAsync", 61, 62, copy, cid=14),  # pageable, no sync: the host still waits
        _ev("Memcpy DtoH (Device -> Pageable)", 63, 64, cid=14, device="CUDA"),
        _ev("cudaStreamSynchronize", 80, 81, marker, cid=15),  # no op: a plain stream sync
        _ev("cudaDeviceSynchronize", 200, 210, None, cid=16),  # the profiler stopping: outside
        _ev("cudaStreamSynchronize", 50, 51, None, cid=17, thread=2),  # another thread
    ]
    truth = cr.read_trace(events)
    assert truth["ok"]
    got = [(w["kind"], w["direction"], w["memory"], w["op"]) for w in truth["waits"]]
    assert got == [("blocking_copy_h2d", "h2d", "pageable", "aten::index_put_"),
                   ("stream_sync", None, None, None),
                   ("pageable_copy", "d2h", "pageable", "aten::copy_")]
    assert truth["calls"] == {"cudaMemcpyAsync": 3, "cudaStreamSynchronize": 2}


def test_trace_without_the_marker_is_not_ground_truth():
    assert cr.read_trace([_ev("cudaStreamSynchronize", 0, 1)])["ok"] is False


def test_judging_counts_kind_memory_line_and_threads():
    case = {"file": "tests/gpu/library_corpus.py", "line": 10, "corpus": "library"}
    truth = {"syncs": True, "waits": [dict(H2D)]}
    right = {"kind": "blocking_copy_h2d", "memory": "pageable", "file": case["file"], "lineno": 10,
             "thread": "MainThread", "stack": []}
    vague = dict(right, memory=None, lineno=11)
    noise = dict(right, thread=cr.NOISE_THREAD)
    a = cr.judge(case, truth, {"syncs": [right, noise], "allowed": []})
    assert a == {"syncs": True, "other_threads": 1, "kind": True, "kind_memory": True,
                 "lines_ok": 1, "lines": 1}
    b = cr.judge(case, truth, {"syncs": [vague], "allowed": []})
    assert (b["kind"], b["kind_memory"], b["lines_ok"]) == (True, False, 0)
    c = cr.judge(case, truth, {"syncs": [], "allowed": []})
    assert (c["syncs"], c["kind"]) == (False, False)
    # a sync in the snippet's own helper (a compiled function's .item() at a graph break) is on
    # the snippet's line when that line called it; one in another file below it is not
    site = f"{case['file']}:10 in snippet"
    helper = dict(right, lineno=165, stack=[f"{case['file']}:165 in helper", site])
    assert cr.judge(case, truth, {"syncs": [helper], "allowed": []})["lines_ok"] == 1
    elsewhere = dict(helper, file="/site-packages/torch/x.py")
    assert cr.judge(case, truth, {"syncs": [elsewhere], "allowed": []})["lines_ok"] == 0
    unrelated = dict(helper, stack=[f"{case['file']}:165 in helper", f"{case['file']}:99 in other"])
    assert cr.judge(case, truth, {"syncs": [unrelated], "allowed": []})["lines_ok"] == 0


def test_converted_runs_keep_what_the_old_run_recorded():
    """The committed schema-1 run of 2.8.0 recorded the CPU-mask put as a blocking H2D copy."""
    old = ROOT / "tests" / "fixtures" / "corpus-run-v1" / "corpus-2.8.0.json"
    doc = cr.convert(json.loads(old.read_text()), str(old))
    row = next(r for r in doc["snippets"] if r["id"] == "corpus/assign_with_cpu_mask")
    assert [w["kind"] for w in row["truth"]["waits"]] == ["blocking_copy_h2d"]
    assert "no independent runtime trace" in doc["provenance"]["truth_source"]


def test_runner_without_cuda_says_so_and_exits_0(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "corpus_report.py"), "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("corpus_report: no CUDA")
    assert list(tmp_path.iterdir()) == []


def _fake_snippet(s):
    from syncguard.testing import fake_sync

    fake_sync("blocking_copy_d2h", api="cudaMemcpyAsync")  # FAKE-CALL


def test_detector_events_travel_through_the_public_api(monkeypatch):
    """The fake detector (plumbing, no GPU): a real SyncEvent from syncguard.audit() is recorded
    with its line, thread and kind, and judged against a ground truth written here."""
    import torch

    from syncguard.testing import marked_line

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    line = marked_line(__file__, "FAKE-CALL")
    case = {"corpus": "library", "setup": None, "context": None, "fn": _fake_snippet,
            "file": os.path.relpath(__file__, ROOT), "line": line}
    det = cr.measure_detectors(case, None, "fake")
    assert det["ran"] == ["fake"]
    (e,) = det["syncs"]
    assert (e["kind"], e["api"], e["file"], e["lineno"]) == (
        "blocking_copy_d2h", "cudaMemcpyAsync", case["file"], line)
    truth = {"syncs": True, "waits": [{"kind": "blocking_copy_d2h", "direction": "d2h",
                                       "memory": "pageable"}]}
    assert cr.judge(case, truth, det) == {"syncs": True, "other_threads": 0, "kind": True,
                                          "kind_memory": False, "lines_ok": 1, "lines": 1}


def test_trace_reading_falls_back_to_the_ops_own_copy_records():
    """No correlation id match: the op's memcpy records are taken in launch order."""
    marker = _ev(cr.MARKER, 0, 100)
    op = _ev("aten::_local_scalar_dense", 1, 50, marker)
    op.kernels = [types.SimpleNamespace(name="Memcpy DtoH (Device -> Pageable)")]
    events = [marker, op, _ev("cudaMemcpyAsync", 2, 3, op, cid=21),
              _ev("cudaStreamSynchronize", 4, 9, op, cid=22)]
    (w,) = cr.read_trace(events)["waits"]
    assert (w["kind"], w["memory"], w["api"]) == (
        "blocking_copy_d2h", "pageable", "cudaMemcpyAsync+cudaStreamSynchronize")


def test_one_failing_snippet_does_not_stop_a_pass(capsys):
    def fn(c):
        if c["id"] == "b":
            raise ValueError("bad\nsecond line")
        return {"ok": c["id"]}

    got = cr.each("pass", [{"id": "a"}, {"id": "b"}, {"id": "c"}], fn)
    assert got == {"a": {"ok": "a"}, "b": {"error": "ValueError: bad"}, "c": {"ok": "c"}}
    assert capsys.readouterr().out.startswith("pass: 3 snippets, 1 failed")


def test_a_value_that_returns_after_changing_is_not_a_transition():
    """A, B, A across versions is run-to-run variation (each version another process), not two
    torch changes; it is listed apart, with every measured value."""
    free = {"kind": "implicit_free", "direction": None, "memory": None, "api": "cudaFree", "op": None}
    runs = [("a", _run("2.8.0", {"library/g": [free, free]})),
            ("b", _run("2.9.0", {"library/g": [free]})),
            ("c", _run("2.10.0", {"library/g": [free, free]})),
            ("d", _run("2.11.0", {"library/h": [H2D]})),
            ("e", _run("2.12.0", {"library/h": []}))]
    built = atlas.build(runs)
    assert [t.split(":")[0] for t in built.transitions] == ["`library/h`"]
    assert [r.id for r in built.unstable] == ["library/g"]
    text = atlas.unstable_text(built.unstable[0], built.columns)
    assert text.startswith("`library/g`: ") and text.count(" on 2.") == 3
    assert "Not transitions" in atlas.render_markdown(built)
