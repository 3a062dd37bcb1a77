"""The rules table against every committed GPU run: it must be exactly what the runs derive,
and predicting each run's torch on the CPU must reproduce what that run measured (whether a
snippet syncs, its kinds, its line)."""
from __future__ import annotations

import os
import sys

import pytest

from syncguard.predict.calibrate import calibrate_corpus
from syncguard.predict.derive import CorpusRun, derive, load_corpus_runs, normalise_op
from syncguard.predict.engine import Observation
from syncguard.predict.rules import load_rules

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))

RUNS = load_corpus_runs(ROOT)


def test_the_committed_table_is_what_the_committed_runs_derive(capsys):
    import predict_rules

    assert RUNS, "no committed corpus runs found"
    assert predict_rules.main(["check"]) == 0, capsys.readouterr().out


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.torch)
def test_every_committed_run_is_reproduced_on_the_cpu(run):
    from tests.gpu import corpus

    cal = calibrate_corpus(corpus.SNIPPETS, corpus.state, run, run.torch, load_rules(), ROOT)
    bad = [f"{r.name}: {r.disagreement()}" for r in cal.rows
           if not (r.whether_ok and r.kind_ok and r.line_ok is not False)]
    assert not bad, "\n".join(bad)
    assert len(cal.rows) == len(run.snippets)


def test_profiler_names_of_python_syncs_are_normalised():
    """2.14.1 recorded Python-level syncs by their bound-method repr (the stale op names)."""
    assert normalise_op("<built-in method synchronize of Stream object at 0x7f>") == \
        "torch.cuda.Stream.synchronize"
    assert normalise_op("<built-in function _cuda_emptyCache>") == "torch.cuda.empty_cache"
    assert normalise_op("aten::nonzero") == "aten::nonzero"


class _Snip:
    def __init__(self, name, line):
        self.name, self.sync_line = name, line


def test_two_runs_of_one_torch_disagreeing_on_a_key_is_a_conflict():
    """Plumbing with a made-up run (no GPU data): one key, clean in one snippet and syncing in
    another, must be reported, not silently resolved."""
    a, b = _Snip("a", 10), _Snip("b", 20)
    run = CorpusRun("fake.json", "2.11.0", {}, {
        "a": {"all": [{"kind": "blocking_copy_d2h", "api": "cudaStreamSynchronize",
                       "op": "aten::sum", "line": 10}]},
        "b": {"all": []}})
    calls = {"a": [Observation("aten::sum", (), "x.py", 10, "unmodelled")],
             "b": [Observation("aten::sum", (), "x.py", 20, "unmodelled")]}
    d = derive([run], [a, b], calls)
    assert any("aten::sum[]" in c for c in d.conflicts), d.conflicts
