"""Scope by code location (codescope.py) and per-site records (aggregate.py), on the CPU.

The pure rule is tested on hand-written frames. The plugin runs use the FAKE detector
(``--syncguard-detectors=fake`` and ``syncguard.testing.fake_sync()``): they prove which frame a
sync counts at, what fails and what the report stores, never GPU behaviour. The "third-party"
library is a package in a folder named ``site-packages`` inside pytester's tmp path.
"""
from __future__ import annotations

import json
import os

import pytest

from syncguard.reporting import sessionfile
from syncguard.attribution.aggregate import SiteRecord, aggregate
from syncguard.attribution.codescope import (EVERYWHERE, CodeScope, Frame, attribute, default_scope,
                                 library_name, resolve)
from syncguard.records.events import SchemaError, SyncEvent
from syncguard.testing import marked_line
from test_plugin import FAKE, _doc, _tests, run  # noqa: F401  (run is a fixture)

SEP = os.sep


def _p(*parts: str) -> str:
    return SEP + SEP.join(parts)


# -- the pure rule ------------------------------------------------------------------------------

def test_most_specific_path_decides_and_libraries_are_out_unless_named():
    scope = CodeScope(include=(_p("proj", "src"), _p("venv", "site-packages", "lib1")),
                      ignore=(_p("proj", "src", "pkg", "testing"),))
    assert scope.contains(_p("proj", "src", "pkg", "core.py"))
    assert not scope.contains(_p("proj", "src", "pkg", "testing", "asserts.py"))
    assert not scope.contains(_p("proj", "srcx", "a.py"))  # a prefix of the name is not a folder
    assert scope.contains(_p("venv", "site-packages", "lib1", "x.py"))
    assert not scope.contains(_p("venv", "site-packages", "lib2", "x.py"))
    # a venv inside the project is a library folder, more specific than the project
    inside = CodeScope(include=(_p("proj"),))
    assert not inside.contains(_p("proj", ".venv", "lib", "site-packages", "lib1", "x.py"))
    assert not inside.contains("<string>")


def test_attribution_inside_a_library_names_entry_and_user_frames():
    lib = _p("v", "site-packages", "fancylib")
    torch_mod = _p("v", "site-packages", "torch", "nn", "modules", "module.py")
    frames = [Frame(f"{lib}{SEP}route.py", 9, "_inner"), Frame(f"{lib}{SEP}route.py", 3, "route"),
              Frame(torch_mod, 1700, "_call_impl"), Frame(f"{lib}{SEP}model.py", 20, "forward"),
              Frame(torch_mod, 1700, "_call_impl"), Frame(_p("proj", "src", "pkg", "m.py"), 7, "f"),
              Frame(_p("proj", "tests", "test_m.py"), 4, "test_f")]
    mine = attribute(frames, CodeScope(include=(_p("proj", "src"),)))
    assert mine.in_scope and mine.counted == frames[5]  # counts at the user's line
    assert mine.user == frames[5] and mine.entry == frames[3]  # torch frames are not fancylib's
    theirs = attribute(frames, CodeScope(include=(lib,)))
    assert theirs.in_scope and theirs.counted == frames[0]
    nobody = attribute(frames[:2] + frames[6:], CodeScope(include=(_p("proj", "src"),)))
    assert not nobody.in_scope and nobody.counted is None and nobody.user == frames[6]
    assert library_name(frames[0].filename) == "fancylib"


def test_a_sync_without_frames_always_counts():
    how = attribute((), CodeScope(include=(_p("proj", "src"),)))
    assert how.in_scope and how.counted is None


def test_default_scope_src_then_packages_then_everything(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    assert default_scope(tmp_path).everything  # tests/ is never the project's package
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    flat = default_scope(tmp_path)
    assert flat.contains(str(tmp_path / "pkg" / "core.py"))
    assert not flat.contains(str(tmp_path / "pkg" / "test_core.py"))  # a test file, even here
    assert not flat.contains(str(tmp_path / "pkg" / "conftest.py"))
    assert not flat.contains(str(tmp_path / "tests" / "helpers.py"))
    (tmp_path / "src").mkdir()
    src = default_scope(tmp_path)
    assert src.contains(str(tmp_path / "src" / "pkg" / "a.py"))
    assert not src.contains(str(tmp_path / "pkg" / "core.py"))


def test_resolve_paths_packages_and_errors(tmp_path):
    scope = resolve(("json",), (), tmp_path)  # an importable package: the stdlib's json
    import json as stdlib_json
    assert scope.contains(stdlib_json.__file__) and not scope.contains(os.__file__)
    everything = resolve(("*",), (), tmp_path)
    assert everything.everything and everything.text == EVERYWHERE.text
    assert everything.source == "--syncguard-scope"  # the stand-in when no source is passed
    sub = resolve(("email.mime",), (), tmp_path)  # a subpackage
    assert sub.contains(os.path.join(os.path.dirname(stdlib_json.__file__), "..", "email", "mime",
                                     "text.py"))
    assert not sub.contains(os.path.join(os.path.dirname(stdlib_json.__file__), "..", "email",
                                         "parser.py"))
    with pytest.raises(ValueError, match=r"^--syncguard-scope: 'nope/x' is neither a path"):
        resolve(("nope/x",), (), tmp_path)
    with pytest.raises(ValueError, match=r"^--syncguard-ignore: 'gone' is neither"):
        resolve((), ("gone",), tmp_path)


def test_packages_are_found_without_importing_them(tmp_path, monkeypatch):
    """Resolving runs at start-up: package code (which may initialise CUDA) must not run then."""
    pkg = tmp_path / "lib" / "boom"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "leaf.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    assert resolve(("boom",), (), tmp_path).contains(str(pkg / "core.py"))
    assert resolve(("boom.sub",), (), tmp_path).contains(str(pkg / "sub" / "x.py"))
    leaf = resolve(("boom.leaf",), (), tmp_path)
    assert leaf.contains(str(pkg / "leaf.py")) and not leaf.contains(str(pkg / "other.py"))


def test_records_count_time_and_phases():
    def ev(line, blocked=None, **kw):
        return SyncEvent("cudaStreamSynchronize", "stream_sync", filename="/p/a.py", lineno=line,
                         function="f", stack=(f"/p/a.py:{line} in f",), host_blocked_us=blocked,
                         **kw)
    events = [ev(1, 10.0), ev(1, 30.0), ev(1), ev(2, 5.0), ev(1, 20.0)]
    inside, outside = aggregate(events, EVERYWHERE)
    assert outside == []
    first, second = inside
    assert (first.lineno, first.count, first.blocked_us_total, first.blocked_us_max) == (1, 4, 60.0,
                                                                                       30.0)
    assert dict(first.phases) == {"run": 4} and first.stack == (Frame("/p/a.py", 1, "f"),)
    assert (second.lineno, second.count, second.blocked_us_max) == (2, 1, 5.0)
    assert SiteRecord.from_dict(json.loads(json.dumps(first.to_dict()))) == first


# -- the plugin ---------------------------------------------------------------------------------

PKG = '''\
from syncguard.testing import fake_sync
import fancylib


def own():
    fake_sync()  # own sync


def through_library():
    return fancylib.route()  # calls the library


def through_deep_library():
    return fancylib.deep(20)  # deep call


def many(n):
    for _ in range(n):
        fake_sync()  # loop sync
    fake_sync(kind="device_sync", api="cudaDeviceSynchronize")  # once
'''
LIB = '''\
from syncguard.testing import fake_sync


def _inner():
    fake_sync()  # library sync


def route():
    return _inner()  # library entry


def deep(n):
    return deep(n - 1) if n else _inner()  # deep entry
'''
TESTS = '''\
import fancylib
import mypkg
from mypkg.testing import check
from syncguard.testing import fake_sync


def test_own():
    mypkg.own()


def test_test_code():
    fake_sync()  # test's own sync


def test_library_from_package():
    mypkg.through_library()


def test_library_from_test():
    fancylib.route()


def test_helper():
    check()


def test_many():
    mypkg.many(50)


def test_deep():
    mypkg.through_deep_library()
'''
HELPER = '''\
from syncguard.testing import fake_sync


def check():
    fake_sync()  # helper sync
'''


@pytest.fixture
def project(pytester):
    """A src-layout project, its tests, and a library in a ``site-packages`` folder."""
    pytester.makeini("[pytest]\npythonpath = src vendor/site-packages\n")
    for rel, text in {"src/mypkg/__init__.py": PKG, "src/mypkg/testing.py": HELPER,
                      "vendor/site-packages/fancylib/__init__.py": LIB,
                      "tests/test_m.py": TESTS}.items():
        path = pytester.path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pytester


def _where(rec: dict) -> tuple[str, int]:
    return os.path.relpath(rec["filename"]), rec["lineno"]


def test_default_scope_counts_the_package_and_reports_the_rest(project, run):
    res = run(FAKE, "--syncguard", "--syncguard-report=r.json")
    res.assert_outcomes(passed=2, failed=5)
    t = _tests(_doc(project))
    pkg, lib = "src/mypkg/__init__.py", "vendor/site-packages/fancylib/__init__.py"
    # in scope: the package's own line
    assert [_where(r) for r in t["test_own"]["syncs"]] == [(pkg, marked_line(pkg, "own sync"))]
    # the test's own code and a library the test called directly: outside, never failing
    for name, site in (("test_test_code", ("tests/test_m.py", marked_line("tests/test_m.py",
                                                                          "test's own sync"))),
                       ("test_library_from_test", (lib, marked_line(lib, "library sync")))):
        assert t[name]["outcome"] == "passed" and t[name]["audit"] == "clean" and not t[name]["syncs"]
        assert [_where(r) for r in t[name]["outside"]] == [site]
    # a library called from the package: counts at the package's line, with both frames named
    (rec,) = t["test_library_from_package"]["syncs"]
    assert _where(rec) == (pkg, marked_line(pkg, "calls the library"))
    assert rec["entry_frame"].startswith(f"{project.path / lib}:{marked_line(lib, 'library entry')} ")
    assert rec["user_frame"].startswith(f"{project.path / pkg}:{marked_line(pkg, 'calls the library')} ")
    assert rec["stack"][0].startswith(f"{project.path / lib}:{marked_line(lib, 'library sync')} ")
    # 22 library frames deep: the stack still reaches the package (detect.user_site's depth)
    (rec,) = t["test_deep"]["syncs"]
    assert _where(rec) == (pkg, marked_line(pkg, "deep call"))
    assert rec["entry_frame"].startswith(f"{project.path / lib}:{marked_line(lib, 'deep entry')} ")
    # a helper inside the package counts until it is ignored (next test)
    assert t["test_helper"]["outcome"] == "failed"
    # the failure table shows the same site, then the library line that synced
    res.stdout.fnmatch_lines([f"*syncguard: tests/test_m.py::test_library_from_package: *",
                              f"*1   {pkg}:{marked_line(pkg, 'calls the library')} *",
                              f"*synced at {lib}:{marked_line(lib, 'library sync')}*"])
    res.stdout.fnmatch_lines(["scope: src/ (default; test files and conftest.py outside)",
                              "outside scope (not failing): 2 sync(s) at 2 site(s); top:"])


def test_ignore_and_library_scope(project, run):
    res = run(FAKE, "--syncguard", "--syncguard-report=r.json", "--syncguard-scope=fancylib",
              "--syncguard-ignore=src/mypkg/testing.py")
    res.assert_outcomes(passed=4, failed=3)
    t = _tests(_doc(project))
    lib = "vendor/site-packages/fancylib/__init__.py"
    for name in ("test_library_from_test", "test_library_from_package"):
        assert [_where(r) for r in t[name]["syncs"]] == [(lib, marked_line(lib, "library sync"))]
    assert t["test_own"]["audit"] == "clean" and t["test_own"]["outside"]
    res = run(FAKE, "--syncguard", "--syncguard-report=r.json",
              "--syncguard-ignore=src/mypkg/testing.py")
    t = _tests(_doc(project))
    assert t["test_helper"]["outcome"] == "passed" and len(t["test_helper"]["outside"]) == 1


def test_marker_and_fixture_set_the_scope(project, run):
    (project.path / "tests" / "test_m.py").write_text(TESTS.replace("def test_test_code():", (
        "import pytest\n\n\n@pytest.mark.syncguard(scope='tests')\ndef test_test_code():")
    ).replace("def test_own():\n    mypkg.own()", (
        "def test_own(syncguard):\n    syncguard.set_scope(ignore='src/mypkg')\n    mypkg.own()")))
    run(FAKE, "--syncguard", "--syncguard-report=r.json", "-k", "test_own or test_test_code")
    t = _tests(_doc(project))
    assert t["test_test_code"]["outcome"] == "failed" and len(t["test_test_code"]["syncs"]) == 1
    assert t["test_own"]["outcome"] == "passed" and len(t["test_own"]["outside"]) == 1


def test_bad_scope_is_one_line_usage_error(project, run):
    res = run(FAKE, "--syncguard", "--syncguard-scope=src/nope")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["ERROR: syncguard: command line option --syncguard-scope: 'src/nope' is neither "
                              "a path*"])


def test_aggregation_counts_and_keep_events(project, run):
    run(FAKE, "--syncguard", "--syncguard-report=r.json", "-k", "test_many")
    doc = _doc(project)
    (t,) = doc["tests"]
    pkg = "src/mypkg/__init__.py"
    assert [(_where(r), r["kind"], r["count"]) for r in t["syncs"]] == [
        ((pkg, marked_line(pkg, "loop sync")), "stream_sync", 50),
        ((pkg, marked_line(pkg, "once")), "device_sync", 1)]
    assert t["events"] == [] and doc["summary"]["syncs"] == 51
    raw = json.loads((project.path / "r.json").read_text())
    assert raw["schema_version"] == sessionfile.SESSION_SCHEMA_VERSION and all(isinstance(i, int) for i in
                                              raw["tests"][0]["syncs"][0]["stack"])
    run(FAKE, "--syncguard", "--syncguard-report=r.json", "-k", "test_many",
        "--syncguard-keep-events")
    (t,) = _doc(project)["tests"]
    assert len(t["events"]) == 51 and [r["count"] for r in t["syncs"]] == [50, 1]
    run(FAKE, "--syncguard", "--syncguard-report=r.json", "-k", "test_many",
        "--syncguard-max-stacks=1")
    (t,) = _doc(project)["tests"]
    assert [bool(r["stack"]) for r in t["syncs"]] == [True, False]


def test_reports_of_schema_1_are_read_and_others_refused(tmp_path):
    event = {"api": "cudaStreamSynchronize", "kind": "stream_sync", "filename": "/p/a.py",
             "lineno": 3}
    v1 = {"schema_version": 1, "kind": "syncguard-session", "environment": {},
          "tests": [{"nodeid": "t::a", "outcome": "passed", "audit": "syncs",
                     "syncs": [event, event, {**event, "lineno": 4}]}]}
    (tmp_path / "v1.json").write_text(json.dumps(v1))
    (t,) = sessionfile.load_document(tmp_path / "v1.json")["tests"]
    assert [(r.lineno, r.count) for r in t.syncs] == [(3, 2), (4, 1)] and t.outside == ()
    (tmp_path / "v6.json").write_text(json.dumps({**v1, "schema_version": 6}))
    with pytest.raises(SchemaError, match=r"v6.json: session report has schema_version 6; "
                                          r"this syncguard reads 1, 2, 3, 4, 5$"):
        sessionfile.load_document(tmp_path / "v6.json")


def test_hypothesis_examples_are_judged_in_scope(project, run):
    """Each example is audited on its own (examples.py): only in-scope syncs fail one."""
    (project.path / "tests" / "test_h.py").write_text(
        "from hypothesis import given, settings, strategies as st\n"
        "from syncguard.testing import fake_sync\n"
        "import mypkg\n\n\n"
        "@settings(max_examples=5, database=None)\n@given(st.integers())\n"
        "def test_body_syncs(i):\n    fake_sync()\n\n\n"
        "@settings(max_examples=5, database=None)\n@given(st.integers())\n"
        "def test_package_syncs(i):\n    mypkg.own()\n")
    res = run(FAKE, "--syncguard", "--syncguard-report=r.json", "tests/test_h.py")
    res.assert_outcomes(passed=1, failed=1)
    t = _tests(_doc(project))
    assert t["test_body_syncs"]["outcome"] == "passed" and t["test_body_syncs"]["outside"]
    assert t["test_package_syncs"]["outcome"] == "failed" and t["test_package_syncs"]["syncs"]


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_bad_marker_scope_names_the_test(project, run, xdist):
    (project.path / "tests" / "test_b.py").write_text(
        "import pytest\n\n\n@pytest.mark.syncguard(scope='nowhere/at/all')\ndef test_b():\n    pass\n")
    res = run(FAKE, "--syncguard", "tests/test_b.py", *xdist, subprocess=bool(xdist))
    assert res.ret != 0
    out = res.stdout.str() + res.stderr.str()
    assert "tests/test_b.py::test_b: @pytest.mark.syncguard: scope: 'nowhere/at/all' is neither" in out
    assert "INTERNALERROR" not in out


def test_a_folder_that_cannot_be_read_is_not_a_package(tmp_path, monkeypatch):
    """Found dropping the plugin into another suite: a root-owned folder under the rootdir (a
    database volume, mode 700) made Path.exists() raise EACCES, and pytest stopped with an
    INTERNALERROR in runs that audit nothing. Faked here: the tests run as root, which reads all."""
    import pathlib
    for name in ("pkg", "locked"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    real_exists = pathlib.Path.exists

    def exists(self, *args, **kw):
        if self.parent.name == "locked":
            raise PermissionError(13, "Permission denied", str(self))
        return real_exists(self, *args, **kw)
    monkeypatch.setattr(pathlib.Path, "exists", exists)
    scope = default_scope(tmp_path)
    assert scope.include == (os.path.normcase(os.path.abspath(tmp_path / "pkg")),)
    assert scope.text == "pkg/ (default; test files and conftest.py outside)"


def test_the_report_names_where_the_scope_was_given_and_the_gate_sees_one_scope(project, run):
    """Why: the report said ``(--syncguard-scope)`` for a scope from the ini too. It names the
    real source now, while the text the gate compares stays the same for either source: a
    baseline from a command-line run must not read an ini run of one scope as another scope."""
    from syncguard.reporting import baseline
    from syncguard.reporting import matrix

    ini = project.path / "tox.ini"
    sources = {"cli": (["--syncguard-scope=src"], "command line option --syncguard-scope"),
               "override": (["-o", "syncguard_scope=src"],
                            "ini option syncguard_scope (-o/--override-ini)"),
               "ini": ([], f"ini option syncguard_scope ({ini})")}
    docs = {}
    for name, (args, source) in sources.items():
        if name == "ini":
            ini.write_text("[pytest]\npythonpath = src vendor/site-packages\nsyncguard_scope = src\n")
        res = run(FAKE, "--syncguard", "--syncguard-report=r.json", "-k", "test_own", *args)
        res.stdout.fnmatch_lines([f"scope: src ({source})"])
        docs[name] = sessionfile.load_document(project.path / "r.json")
        assert docs[name]["options"]["scope"] == "src"
        assert docs[name]["options"]["scope_from"] == source
    base = baseline.make(matrix.build([("cli.json", docs["cli"])]))
    for name in ("override", "ini"):
        cmp = baseline.compare(matrix.build([(f"{name}.json", docs[name])]), base)
        assert _scope_changes(cmp) == [], name


def test_the_report_names_where_everything_and_the_ignored_names_were_given(project, run):
    """Found by a reviewer: ``--syncguard-scope=*`` and the ``; ignoring ...`` part of a scope
    named no source, in the summary line or the report, where a given scope names its own."""
    ini = project.path / "tox.ini"
    ini.write_text("[pytest]\npythonpath = src vendor/site-packages\n"
                   "syncguard_ignore = src/mypkg/testing.py\n")
    ignore_source = f"ini option syncguard_ignore ({ini})"
    res = run(FAKE, "--syncguard", "--syncguard-report=r.json", "-k", "test_own",
              "--syncguard-scope=src")
    res.stdout.fnmatch_lines([f"scope: src (command line option --syncguard-scope); ignoring "
                              f"src/mypkg/testing.py ({ignore_source})"])
    doc = sessionfile.load_document(project.path / "r.json")
    assert doc["options"]["scope"] == "src; ignoring src/mypkg/testing.py"
    assert doc["options"]["ignore_from"] == ignore_source
    ini.write_text("[pytest]\npythonpath = src vendor/site-packages\n")
    res = run(FAKE, "--syncguard", "--syncguard-report=r.json", "-k", "test_own",
              "--syncguard-scope=*")
    res.stdout.fnmatch_lines(["scope: everything (every sync counts) "
                              "(command line option --syncguard-scope)"])
    doc = sessionfile.load_document(project.path / "r.json")
    assert doc["options"]["scope_from"] == "command line option --syncguard-scope"
    assert "ignore_from" not in doc["options"]


def test_a_baseline_written_when_the_scope_text_named_the_flag_sees_no_change(project, run):
    """Why: reports and baselines written before the text named no source end a given scope
    with ``(--syncguard-scope)``; the gate must not read that as another scope."""
    from syncguard.reporting import baseline
    from syncguard.reporting import matrix

    run(FAKE, "--syncguard", "--syncguard-report=r.json", "-k", "test_own",
        "--syncguard-scope=src", "--syncguard-ignore=src/mypkg/testing.py")
    doc = sessionfile.load_document(project.path / "r.json")
    old = {**doc, "options": {**doc["options"],
                              "scope": "src (--syncguard-scope); ignoring src/mypkg/testing.py"}}
    del old["options"]["scope_from"]
    base = baseline.make(matrix.build([("old.json", old)]))
    assert _scope_changes(baseline.compare(matrix.build([("new.json", doc)]), base)) == []
    base = baseline.make(matrix.build([("new.json", doc)]))
    assert _scope_changes(baseline.compare(matrix.build([("old.json", old)]), base)) == []
    # a scope that did change still does
    other = {**doc, "options": {**doc["options"], "scope": "src/mypkg"}}
    assert _scope_changes(baseline.compare(matrix.build([("other.json", other)]), base)) == [
        "code scope src; ignoring src/mypkg/testing.py -> src/mypkg"]


def _scope_changes(cmp) -> list[str]:
    """The gate's whole-run regressions for a change of code scope (a run without CUDA also
    has its "zero audited cases" one, which is not what these tests look at)."""
    return [r.why for r in cmp.regressions if r.why.startswith("code scope")]
