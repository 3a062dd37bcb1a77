"""Provenance in session reports and the hypothesis profile choice.

No GPU here: the torch/GPU/driver fields are those of this CPU machine (null GPU), and the git
state comes from throwaway repositories made in tmp_path.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from syncguard.reporting import provenance

ROOT = Path(__file__).resolve().parents[1]
SRC_PKG = ROOT / "src" / "syncguard"
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


def _sha256_of_c_sources(folder: Path) -> str:
    """The digest of C sources as the test states it: each .c and .h file's name and bytes, in
    name order, NUL after each."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.iterdir() if p.suffix in (".c", ".h")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _package_copy(dest: Path, with_c: bool = True) -> Path:
    ignore = ["__pycache__"] + ([] if with_c else ["_cuptifast_c"])
    shutil.copytree(SRC_PKG, dest, ignore=shutil.ignore_patterns(*ignore))
    return dest


def test_code_digest_covers_the_c_sources_and_the_rules(tmp_path):
    """A change to a .c file, a header, or the predictor's rules.json changes the digest; a file
    that is no source (a note) does not."""
    pkg = _package_copy(tmp_path / "syncguard")
    first = provenance.code_digest(pkg)
    c_dir = pkg / "detectors" / "cuda" / "_cuptifast_c"
    assert sorted(p.name for p in c_dir.glob("*.c")) and provenance.c_code(pkg) == \
        _sha256_of_c_sources(c_dir)
    for path, edit in [(c_dir / "callback.c", "/* edited */\n"), (c_dir / "cuptifast.h", "\n"),
                       (pkg / "predict" / "rules.json", " ")]:
        before = provenance.code_digest(pkg)
        original = path.read_bytes()
        path.write_bytes(original + edit.encode())
        assert provenance.code_digest(pkg) != before, path.name
        path.write_bytes(original)
        assert provenance.code_digest(pkg) == first
    (c_dir / "NOTES.txt").write_text("not a source\n")
    assert provenance.code_digest(pkg) == first


def _built_module():
    try:
        from syncguard.detectors.cuda import _cuptifast
    except ImportError:
        return None
    return _cuptifast


@pytest.mark.skipif(_built_module() is None, reason="the C callback (_cuptifast) is not built here")
def test_the_built_module_carries_the_digest_of_its_sources():
    """setup.py embeds the digest of the sources it compiled: equal to the digest of the
    sources here (rebuild after editing the C: ``pip install -e .``), and code_digest names
    the C code by it alone (no stale build)."""
    sources = _sha256_of_c_sources(SRC_PKG / "detectors" / "cuda" / "_cuptifast_c")
    assert _built_module().SOURCE_DIGEST == sources
    assert provenance.c_code() == sources


@pytest.mark.skipif(_built_module() is None, reason="the C callback (_cuptifast) is not built here")
def test_a_package_without_c_sources_is_named_by_its_built_module(tmp_path):
    """As a wheel installs it (the built module, no .c): the same code digest as the source
    tree; and without the built module either, a different one (no C code ran)."""
    site = tmp_path / "site"
    _package_copy(site / "syncguard", with_c=False)
    probe = ("from syncguard.reporting import provenance as p; "
             "print(p.__file__); print(p.c_code()); print(p.code_digest())")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                         check=True).stdout.split("\n")
    assert out[0].startswith(str(site))
    assert out[1] == _built_module().SOURCE_DIGEST
    assert out[2] == provenance.code_digest()
    for built in (site / "syncguard" / "detectors" / "cuda").glob("_cuptifast*.so"):
        built.unlink()
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                         check=True).stdout.split("\n")
    assert out[1] == "None" and out[2] != provenance.code_digest()


def test_a_stale_build_is_named_neither_as_its_sources_nor_as_its_build(monkeypatch):
    """C edited and not rebuilt: the module that runs is not what the sources say, nor what a
    wheel of either would say; the identity names both (the built digest stands in here)."""
    sources = _sha256_of_c_sources(SRC_PKG / "detectors" / "cuda" / "_cuptifast_c")
    monkeypatch.setattr(provenance, "_built_digest", lambda: "0" * 64)
    assert provenance.c_code() == f"sources {sources}, built from {'0' * 64}"
    monkeypatch.setattr(provenance, "_built_digest", lambda: sources)
    assert provenance.c_code() == sources


def _commit_all(repo: Path) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "x")
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()


@needs_git
@pytest.mark.parametrize("where", ["vendor/syncguard", "src/syncguard"])
def test_a_copy_inside_another_repository_names_no_syncguard_commit(tmp_path, monkeypatch, where):
    """A copy of the package vendored (and tracked) in a user's repository: that repository's
    commit is not syncguard's; only SYNCGUARD_GIT_COMMIT can name it. The user's project
    commit is still recorded as the project's."""
    monkeypatch.delenv("SYNCGUARD_GIT_COMMIT", raising=False)
    monkeypatch.delenv("SYNCGUARD_GIT_DIRTY", raising=False)
    repo = tmp_path / "user"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "pyproject.toml").write_text('[project]\nname = "users-app"\n')
    pkg = _package_copy(repo / where)
    head = _commit_all(repo)
    assert provenance.git_state(repo) == {"commit": head, "dirty": False}  # the project's
    assert provenance.syncguard_git(pkg) is None
    monkeypatch.setenv("SYNCGUARD_GIT_COMMIT", "abc123")
    assert provenance.syncguard_git(pkg) == {"commit": "abc123", "dirty": False}


@needs_git
def test_syncguards_own_checkout_names_its_commit(tmp_path, monkeypatch):
    monkeypatch.delenv("SYNCGUARD_GIT_COMMIT", raising=False)
    repo = tmp_path / "syncguard-checkout"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "pyproject.toml").write_text('[build-system]\nrequires = []\n\n[project]\n'
                                         'name = "syncguard"\nversion = "0"\n')
    pkg = _package_copy(repo / "src" / "syncguard")
    head = _commit_all(repo)
    assert provenance.syncguard_git(pkg) == {"commit": head, "dirty": False}
    (pkg / "testing.py").write_text("# changed\n")
    assert provenance.syncguard_git(pkg) == {"commit": head, "dirty": True}
    (repo / "pyproject.toml").write_text('[project]\nname = "syncguard-fork"\n')
    assert provenance.syncguard_git(pkg) is None


def test_a_session_report_carries_its_provenance(pytester, tmp_path):
    pytester.makepyfile(test_x="def test_x():\n    assert True\n")
    report = tmp_path / "r.json"
    result = pytester.runpytest("--syncguard", f"--syncguard-report={report}")
    result.assert_outcomes(passed=1)
    doc = json.loads(report.read_text())
    prov = doc["provenance"]
    assert prov["syncguard"]["code"] == provenance.code_digest()
    assert prov["syncguard"]["git"] == provenance.syncguard_git()
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
