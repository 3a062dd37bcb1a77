"""Provenance in session reports (issue 14) and the hypothesis profile choice (issue 10).

No GPU here: the torch/GPU/driver fields are those of this CPU machine (null GPU), and the git
state comes from throwaway repositories made in tmp_path.
"""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import settings

from syncguard.reporting import provenance

ROOT = Path(__file__).resolve().parents[1]
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git executable")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True)


@needs_git
def test_git_state_names_the_commit_and_whether_tracked_files_changed(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    _git(repo, "add", "a.txt")
    _git(repo, "commit", "-q", "-m", "first")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert provenance.git_state(repo) == {"commit": head, "dirty": False}
    (repo / "untracked.json").write_text("{}")  # e.g. the report being written: not dirty
    assert provenance.git_state(repo)["dirty"] is False
    (repo / "a.txt").write_text("two\n")
    assert provenance.git_state(repo) == {"commit": head, "dirty": True}
    assert provenance.git_state(tmp_path / "nowhere") is None


def test_a_copy_without_git_is_named_by_its_caller(tmp_path, monkeypatch):
    """The GPU machine receives the tree without .git; tools/gpu_suite.sh names the commit."""
    monkeypatch.setenv("SYNCGUARD_GIT_COMMIT", "abc123")
    assert provenance.git_state(tmp_path) == {"commit": "abc123", "dirty": False}
    monkeypatch.setenv("SYNCGUARD_GIT_DIRTY", "1")
    assert provenance.git_state(tmp_path) == {"commit": "abc123", "dirty": True}


def test_code_digest_changes_with_any_source_file(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    first = provenance.code_digest(pkg)
    assert provenance.code_digest(pkg) == first and len(first) == 64
    (pkg / "sub" / "b.py").write_text("y = 3\n")
    assert provenance.code_digest(pkg) != first
    assert provenance.code_digest() == provenance.code_digest(ROOT / "src" / "syncguard")


def test_a_session_report_carries_its_provenance(pytester, tmp_path):
    pytester.makepyfile(test_x="def test_x():\n    assert True\n")
    report = tmp_path / "r.json"
    result = pytester.runpytest("--syncguard", f"--syncguard-report={report}")
    result.assert_outcomes(passed=1)
    doc = json.loads(report.read_text())
    prov = doc["provenance"]
    assert prov["syncguard"]["code"] == provenance.code_digest()
    assert prov["detectors"] == doc["options"]["detectors"]
    assert prov["torch"] == doc["environment"]["torch"]
    assert prov["cuda_build"] == doc["environment"]["cuda_runtime"]
    hyp = prov["hypothesis"]
    assert hyp["max_examples"] == settings.default.max_examples
    assert hyp["profile"] in ("ci", "dev", "gpu")
    shown = provenance.describe(doc)
    assert shown["hypothesis"] == f"{hyp['profile']} profile, {hyp['max_examples']} examples"
    assert provenance.code_identity(doc) == prov["syncguard"]["code"]


def test_reports_without_provenance_read_as_unknown():
    assert provenance.code_identity({"environment": {}}) is None
    assert provenance.describe({})["commit"] == "unknown (no provenance)"
    odd = {"provenance": {"project": None, "syncguard": "x", "detectors": 3, "hypothesis": []}}
    shown = provenance.describe(odd)  # malformed fields never raise
    assert shown["commit"] == "not a git checkout" and shown["detectors"] == "?"


def _root_conftest():
    spec = importlib.util.spec_from_file_location("_root_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("env, expected", [
    ({"CI": "true"}, "ci"), ({"CI": "1"}, "ci"), ({"CI": "false"}, "dev"), ({}, "dev"),
    ({"CI": "true", "HYPOTHESIS_PROFILE": "gpu"}, "gpu"),
])
def test_the_ci_profile_is_derandomized_and_chosen_under_ci(env, expected):
    conftest = _root_conftest()
    assert conftest.chosen_profile(env) == expected
    ci = settings.get_profile("ci")
    assert ci.derandomize is True and ci.database is None
    assert settings.get_profile("dev").derandomize is False
    with pytest.raises(ValueError, match="HYPOTHESIS_PROFILE='nope'"):
        conftest.chosen_profile({"HYPOTHESIS_PROFILE": "nope"})


def test_describe_names_what_ran_beside_what_was_asked():
    doc = {"provenance": {"detectors": ["auto"], "detectors_ran": "debug,trace: cuda detector "
                                                                 "not used (no libcupti)"}}
    assert provenance.describe(doc)["detectors"] == (
        "auto (ran: debug,trace: cuda detector not used (no libcupti))")
    assert provenance.describe({"provenance": {"detectors": ["auto"]}})["detectors"] == "auto"
