"""Code scope and per-site records with real syncs on a GPU (skipped without CUDA).

A src-layout project whose package calls ``.item()`` in a loop and calls a "third-party" library
(a package in a folder named ``site-packages``) that calls ``.tolist()``; its tests also sync in
their own body. Run with the default detectors in fail mode: the package's syncs fail their tests
and are stored as one record per site with the loop's count; the test's own sync is outside the
scope and fails nothing. Evidence goes to ``$SYNCGUARD_GPU_OUT/<test name>/`` (see
test_plugin_gpu.py).
"""
from __future__ import annotations

import pytest

from gpu.test_plugin_gpu import _tests, run  # noqa: F401  (run is a fixture)

pytestmark = pytest.mark.gpu

PKG = '''\
import torch
import fancylib


def own(n):
    x = torch.ones(4, device="cuda")
    total = 0.0
    for _ in range(n):
        total += (x * 2).sum().item()  # own sync
    return total


def through_library():
    return fancylib.route(torch.arange(8, device="cuda"))  # calls the library
'''
LIB = '''\
def _inner(t):
    return (t % 3).tolist()  # library sync


def route(t):
    return _inner(t)  # library entry
'''
TESTS = '''\
import torch
import mypkg


def test_own():
    assert mypkg.own(100) == 800.0


def test_test_code():
    t = torch.ones(3, device="cuda")
    print(f"{t.sum().item()=}")  # test's own sync


def test_library_from_package():
    assert len(mypkg.through_library()) == 8
'''


def _line(text: str, marker: str) -> int:
    return next(i for i, x in enumerate(text.splitlines(), 1) if x.endswith(f"# {marker}"))


def test_scope_and_records_with_real_syncs(pytester, run):
    pytester.makeini("[pytest]\npythonpath = src vendor/site-packages\n")
    for rel, text in {"src/mypkg/__init__.py": PKG, "vendor/site-packages/fancylib/__init__.py": LIB,
                      "tests/test_m.py": TESTS}.items():
        path = pytester.path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    res = run("--syncguard", "--syncguard-report=r.json")
    res.assert_outcomes(passed=1, failed=2)
    t = _tests(pytester)
    pkg = str(pytester.path / "src/mypkg/__init__.py")
    own = t["test_own"]
    assert own["outcome"] == "failed" and own["syncs"]
    assert {(r["filename"], r["lineno"]) for r in own["syncs"]} == {(pkg, _line(PKG, "own sync"))}
    per_kind: dict[str, int] = {}
    for r in own["syncs"]:
        per_kind[r["kind"]] = per_kind.get(r["kind"], 0) + r["count"]
    assert set(per_kind.values()) == {100}, per_kind  # the loop's 100 .item() calls, per kind
    code = t["test_test_code"]
    assert (code["outcome"], code["audit"], code["syncs"]) == ("passed", "clean", [])
    assert {r["lineno"] for r in code["outside"]} == {_line(TESTS, "test's own sync")}
    lib = t["test_library_from_package"]
    assert {(r["filename"], r["lineno"]) for r in lib["syncs"]} == {(pkg, _line(PKG,
                                                                              "calls the library"))}
    lib_file = str(pytester.path / "vendor/site-packages/fancylib/__init__.py")
    assert all(r["entry_frame"].startswith(f"{lib_file}:{_line(LIB, 'library entry')} ")
               for r in lib["syncs"])
    res.stdout.fnmatch_lines(["outside scope (not failing): * sync(s) at * site(s); top:"])
