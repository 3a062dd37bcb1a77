"""``--syncguard-predict-torch=X.Y``: predict for the torch a GPU CI runs, from the nearest
measured version's rules (pytester runs on this CPU machine, under prediction). The expected
versions are the committed corpus runs' (reports/atlas-runs/corpus-run-2.11.0.json measured
``.item()``), typed here, not read from the code under test."""
from __future__ import annotations

import json

import pytest

TEST = """
import torch

def test_item():
    torch.ones(2, device="cuda").sum().item()
"""


@pytest.fixture
def run(pytester):
    pytester.makepyfile(test_m=TEST)

    def _run(*args):  # in-process: tests/conftest.py keeps torch._dynamo imported across runs
        return pytester.runpytest_inprocess("-p", "no:cacheprovider", "--syncguard",
                                            "--syncguard-predict", *args)
    return _run


def test_predicts_for_the_named_torch_from_its_nearest_measured_rules(pytester, run):
    res = run("--syncguard-predict-torch=2.10", "--syncguard-report=r.json")
    res.assert_outcomes(passed=1)
    doc = json.loads((pytester.path / "r.json").read_text())
    (t,) = doc["tests"]
    (rec,) = t["syncs"]
    # 2.10 was never measured: 2.9.1 and 2.11.0 are one minor step away; 2.11.0's patch
    # level is the nearer to 2.10's (.0)
    assert rec["kind"] == "blocking_copy_d2h"
    assert "rules of torch 2.11.0" in rec["note"], rec
    assert "for torch 2.10" in t["reason"], t["reason"]
    assert doc["options"]["predict_torch"] == "2.10"
    assert "for torch 2.10" in res.stdout.str()


def test_a_measured_version_is_used_as_is(pytester, run):
    res = run("--syncguard-predict-torch=2.11", "--syncguard-report=r.json")
    res.assert_outcomes(passed=1)
    (rec,) = json.loads((pytester.path / "r.json").read_text())["tests"][0]["syncs"]
    assert "rules of torch 2.11.0" in rec["note"], rec


@pytest.mark.parametrize("bad", ["latest", "2", "2.x", "2.11.0.1"])
def test_a_bad_value_is_one_usage_line(run, bad):
    res = run(f"--syncguard-predict-torch={bad}")
    assert res.ret == 4  # pytest's usage error
    err = [line for line in res.stderr.str().splitlines() if "syncguard" in line]
    assert len(err) == 1 and repr(bad) in err[0] and "torch version" in err[0], err
