"""The pytest plugin's plumbing, on the CPU.

Every inner test run here uses the FAKE detector (``--syncguard-detectors=fake`` and
``syncguard.testing.fake_sync()``) or a faked sticky-CUDA-error probe: they prove options, markers,
reports, xdist merging and isolation, never GPU behaviour (samples/gpu_project does that on a GPU).
"""
from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest

from syncguard.reporting import sessionfile
from syncguard.records.events import DETECTORS

# pytester's in-process runs drop modules first imported inside them; import the heavy ones here
# so each inner run does not pay for them again.
import hypothesis  # noqa: E402,F401
import warnings  # noqa: E402

with warnings.catch_warnings():  # libcst (used to write failing-example patches) warns on import
    warnings.simplefilter("ignore", DeprecationWarning)
    try:
        import hypothesis.extra._patching  # noqa: E402,F401
    except ImportError:  # libcst is optional (absent on the GPU image)
        pass
import rich.console  # noqa: E402,F401
import rich.table  # noqa: E402,F401
import syncguard.reporting.explain  # noqa: E402,F401
import syncguard.pytest_plugin.session  # noqa: E402,F401
import torch  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[1]
FAKE = "--syncguard-detectors=fake"
#: runs that prove what happens without CUDA say so: on this CPU machine --syncguard predicts
#: by default (--syncguard-predict=auto; tests/test_predict_default.py)
NO_PREDICT = "--syncguard-predict=off"


def _plugin_args() -> list[str]:
    """Load the plugin once: by entry point when installed, else by module path."""
    installed = any(ep.value == "syncguard.plugin"
                    for ep in importlib.metadata.entry_points(group="pytest11"))
    if not installed:
        return ["-p", "syncguard.plugin"]
    return ["-p", "syncguard"] if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD") else []


@pytest.fixture
def run(pytester, monkeypatch):
    # POISON_CONFTEST replaces syncguard.pytest_plugin.poison.sticky_error, and an in-process run leaves it
    # replaced: later in-process runs on the same xdist worker read "poisoned". Put it back.
    import syncguard.pytest_plugin.poison

    monkeypatch.setattr(syncguard.pytest_plugin.poison, "sticky_error", syncguard.pytest_plugin.poison.sticky_error)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))

    def _run(*args, subprocess=False, **kw):
        args = [*_plugin_args(), "-p", "no:cacheprovider", *args]
        if subprocess:
            return pytester.runpytest_subprocess(*args, timeout=180)
        return pytester.runpytest(*args, **kw)
    return _run


def _doc(pytester, name="r.json"):
    """The session report as load_document validates it, with each test back as its JSON dict."""
    doc = sessionfile.load_document(pytester.path / name)
    return {**doc, "tests": [t.to_dict() for t in doc["tests"]]}


def _line(source: str, needle: str) -> int:
    """1-based line of needle in a file written by pytester.makepyfile (which dedents and strips)."""
    import textwrap
    return textwrap.dedent(source).strip().splitlines().index(
        next(x for x in textwrap.dedent(source).strip().splitlines() if needle in x)) + 1


def _tests(doc):
    return {t["nodeid"].split("::")[-1]: t for t in doc["tests"]}


SYNCING = """
    import pytest
    from syncguard.testing import fake_sync  # FAKE detector: plumbing only

    def test_clean():
        pass

    def test_sync():
        fake_sync(op="aten::nonzero")

    @pytest.mark.allow_sync(reason="the loss is logged once per step")
    def test_allowed():
        fake_sync(op="aten::_local_scalar_dense")

    @pytest.mark.no_syncguard
    def test_off():
        fake_sync()
"""


# -- options, ini, validation ------------------------------------------------------------------

def test_fail_mode_fails_with_table_naming_line(pytester, run):
    pytester.makepyfile(test_m=SYNCING)
    res = run("--syncguard", FAKE, "--syncguard-report=r.json")
    res.assert_outcomes(passed=3, failed=1)
    out = res.stdout.str()
    line = _line(SYNCING, "aten::nonzero")
    assert f"test_m.py:{line}" in out and 'fake_sync(op="aten::nonzero")' in out
    assert "sync-free alternative: torch.nonzero_static" in out  # aten::nonzero: the table's hint
    tests = _tests(_doc(pytester))
    assert [tests[n]["audit"] for n in ("test_clean", "test_sync", "test_allowed", "test_off")] == [
        "clean", "syncs", "allowed", "off"]
    assert tests["test_allowed"]["allowed"][0]["reason"] == "the loss is logged once per step"
    assert tests["test_sync"]["syncs"][0]["lineno"] == line
    res.stdout.fnmatch_lines(["*= syncguard =*", "3 test(s) audited: 1 clean, 1 with syncs, 1 allowed*",
                              "top sync sites:", f"*1x*test_m.py:{line}*aten::nonzero*(1 test(s))"])


def test_warn_mode_warns_and_w_error_fails(pytester, run):
    pytester.makepyfile(test_m=SYNCING)
    res = run("--syncguard", "--syncguard-mode=warn", FAKE)
    res.assert_outcomes(passed=4)
    res.stdout.fnmatch_lines([f"*test_m.py:{_line(SYNCING, 'aten::nonzero')}: SyncguardWarning: "
                              "syncguard: 1 sync(s)*"])
    # -p no:benchmark: pytest-benchmark warns (a UserWarning) at configure under xdist
    res = run("--syncguard", "--syncguard-mode=warn", FAKE, "-W", "error::UserWarning",
              "-p", "no:benchmark")
    res.assert_outcomes(passed=3, failed=1)


def test_ini_twins_and_cli_wins(pytester, run):
    pytester.makepyfile(test_m=SYNCING)
    pytester.makeini("[pytest]\nsyncguard = true\nsyncguard_mode = record\n"
                     "syncguard_detectors = fake\nsyncguard_report = ini.json\n")
    run().assert_outcomes(passed=4)  # record: nothing fails
    assert _doc(pytester, "ini.json")["options"]["mode"] == "record"
    run("--syncguard-mode=fail").assert_outcomes(passed=3, failed=1)


def test_help_names_every_default(pytester, run):
    blocks: dict[str, str] = {}  # option -> its help text, from `pytest --help`
    for line in run("--help").stdout.lines:
        if line.startswith("  -"):
            flag = line.split()[0].split("=")[0]
            blocks[flag] = line
        elif line.startswith("    ") and blocks:
            blocks[flag] += line
    from syncguard.pytest_plugin.options import OPTIONS
    for flag, *_ in OPTIONS:
        assert "(default: " in blocks[flag], blocks[flag]
    assert "(default: fail)" in blocks["--syncguard-mode"]
    assert f"(default: {','.join(DETECTORS)})" in blocks["--syncguard-detectors"]


@pytest.mark.parametrize("args, ini, message", [
    (["--syncguard-mode=loud"], "", "command line option --syncguard-mode: 'loud' is not one of"),
    ([], "syncguard_mode = loud", "ini option syncguard_mode (*tox.ini): 'loud' is not one of"),
    (["--syncguard-detectors=debug,sniff"], "", "command line option --syncguard-detectors: "
                                                "unknown detector(s) [[]'sniff'[]]*"),
    ([], "syncguard_races = maybe", "ini option syncguard_races (*): 'maybe' is not a boolean*"),
    ([], "syncguard_warmup = nocolon", "ini option syncguard_warmup (*): 'nocolon' is not of the "
                                       "form 'module:callable'"),
    ([], "syncguard_warmup = no_such_mod:fn", "ini option syncguard_warmup (*tox.ini): cannot load "
                                             "'no_such_mod:fn'*"),
])
def test_bad_values_name_their_source(pytester, run, args, ini, message):
    pytester.makepyfile("def test_x(): pass")
    pytester.makefile(".ini", tox=f"[pytest]\n{ini}\n")
    res = run("--syncguard", *args)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([f"ERROR: syncguard: {message}*"])


#: for every option (and the ini-only warm-up), a value it refuses, chosen here: the table must
#: name each option, so that one added to options.OPTIONS without a case here fails the test
BAD_VALUE = {
    "syncguard": "maybe", "syncguard_mode": "loud", "syncguard_detectors": "sniff",
    "syncguard_races": "maybe", "syncguard_report": "tox.ini/r.json", "syncguard_isolate": "maybe",
    "syncguard_require_cuda": "maybe", "syncguard_fail_on_phase": "sometimes",
    "syncguard_scope": "no_such_pkg_zz", "syncguard_ignore": "no_such_pkg_zz",
    "syncguard_keep_events": "maybe", "syncguard_max_stacks": "-1", "syncguard_predict": "maybe",
    "syncguard_predict_torch": "latest",
    "syncguard_warmup": "no_such_mod_zz:fn",
}


def _usage_error_line(res) -> str:
    """The one line a usage error prints (anything more, a traceback say, fails here)."""
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str() + res.stderr.str()
    (line,) = [x for x in res.errlines if x.strip()]
    return line


def test_the_bad_value_table_names_every_option():
    from syncguard.pytest_plugin.options import OPTIONS
    assert set(BAD_VALUE) == {dest for _, dest, *_ in OPTIONS} | {"syncguard_warmup"}


@pytest.mark.parametrize("dest", sorted(BAD_VALUE))
def test_a_bad_ini_value_names_the_ini_key_and_file(pytester, run, dest):
    """Found by a reviewer: syncguard_scope and syncguard_report from the ini were checked after
    the settings, and their errors named --syncguard-scope / --syncguard-report, flags the user
    never typed."""
    pytester.makepyfile(test_m="def test_x(): pass")
    pytester.makefile(".ini", tox=f"[pytest]\n{dest} = {BAD_VALUE[dest]}\n")
    line = _usage_error_line(run(*([] if dest == "syncguard" else ["--syncguard"])))
    head = f"ERROR: syncguard: ini option {dest} ({pytester.path / 'tox.ini'}): "
    assert line.startswith(head) and repr(BAD_VALUE[dest]) in line, line


@pytest.mark.parametrize("flag", [f for f, _, _, _, kw, _ in __import__(
    "syncguard.pytest_plugin.options", fromlist=["OPTIONS"]).OPTIONS if kw.get("action") != "store_true"])
def test_a_bad_command_line_value_names_the_flag(pytester, run, flag):
    pytester.makepyfile(test_m="def test_x(): pass")
    pytester.makefile(".ini", tox="[pytest]\n")
    value = BAD_VALUE[flag[2:].replace("-", "_")]
    line = _usage_error_line(run("--syncguard", f"{flag}={value}"))
    assert line.startswith(f"ERROR: syncguard: command line option {flag}: ") and (
        repr(value) in line), line


@pytest.mark.parametrize("dest", ["syncguard_mode", "syncguard_scope", "syncguard_report"])
def test_a_bad_override_ini_value_names_the_override(pytester, run, dest):
    """``-o syncguard_x=...`` is an ini value given on the command line: the ini file (here one
    that does not set it) is not where it came from."""
    pytester.makepyfile(test_m="def test_x(): pass")
    pytester.makefile(".ini", tox="[pytest]\n")
    line = _usage_error_line(run("--syncguard", "-o", f"{dest}={BAD_VALUE[dest]}"))
    assert line.startswith(f"ERROR: syncguard: ini option {dest} (-o/--override-ini): ") and (
        repr(BAD_VALUE[dest]) in line), line


@pytest.mark.parametrize("dest", ["syncguard_scope", "syncguard_ignore"])
def test_an_empty_list_in_the_ini_is_shown_as_written(pytester, run, dest):
    """Why: a list option's ini value reaches syncguard as its lines (linelist); a one-line
    value is shown as the text written, not as a list of it."""
    pytester.makepyfile(test_m="def test_x(): pass")
    line = _usage_error_line(run("--syncguard", "-o", f"{dest}= , "))
    assert line == (f"ERROR: syncguard: ini option {dest} (-o/--override-ini): "
                    "',' names no path or package"), line


@pytest.mark.parametrize("toml, message", [
    ('syncguard_scope = ["no_such_pkg_zz"]', "'no_such_pkg_zz' is neither a path"),
    ('syncguard_mode = ["fail"]', "['fail'] is a list, not one value"),
])
def test_a_bad_list_in_pyproject_names_the_ini_key(pytester, run, toml, message):
    """A TOML list under [tool.pytest.ini_options] reaches the plugin as a list: it had been
    dropped without a word (the option at its default), not read nor refused. The refusal is
    the one message: pytest's warning that a 'string' option will refuse a list had come with
    it, and under -W error stopped the run with an INTERNALERROR instead."""
    pytester.makepyfile(test_m="def test_x(): pass")
    pytester.makepyprojecttoml(f"[tool.pytest.ini_options]\n{toml}\n")
    res = run("--syncguard")
    line = _usage_error_line(res)
    dest = toml.split()[0]
    assert line.startswith(f"ERROR: syncguard: ini option {dest} "
                           f"({pytester.path / 'pyproject.toml'}): ") and message in line, line
    assert "PytestRemovedIn10Warning" not in res.stdout.str() + res.stderr.str()
    res = run("--syncguard", "-W", "error::pytest.PytestRemovedIn10Warning")
    assert res.ret == pytest.ExitCode.USAGE_ERROR and _usage_error_line(res) == line


def test_a_list_in_pyproject_is_read_as_the_list_it_is(pytester, run):
    pytester.makepyfile(test_m="""
        from syncguard.testing import fake_sync  # FAKE detector: plumbing only

        def test_sync():
            fake_sync()
    """)
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\nsyncguard_detectors = ["fake"]\n'
                               'syncguard_scope = ["*"]\n')
    res = run("--syncguard", "-W", "error::pytest.PytestRemovedIn10Warning")
    res.assert_outcomes(failed=1)  # read without pytest's warning that it will refuse a list


# -- markers and fixture -----------------------------------------------------------------------

def test_marker_opts_in_and_overrides_without_flag(pytester, run):
    pytester.makepyfile(test_m="""
        import pytest
        from syncguard.testing import fake_sync  # FAKE detector: plumbing only

        @pytest.mark.syncguard(detectors="fake")
        def test_in():
            fake_sync()

        @pytest.mark.syncguard(detectors=["fake"], mode="record")
        def test_in_record():
            fake_sync()

        def test_not_in():
            fake_sync()  # no region: delivered nowhere
    """)
    res = run("--syncguard-report=r.json")
    res.assert_outcomes(passed=2, failed=1)
    assert sorted(_tests(_doc(pytester))) == ["test_in", "test_in_record"]


@pytest.mark.parametrize("mark, message", [
    ("allow_sync", "needs reason='why this sync is acceptable'"),
    ("allow_sync(max=2)", "needs reason=*"),
    ("allow_sync(reason='x', maxx=2)", "*unexpected keyword argument 'maxx'"),
    ("allow_sync(reason='x', kind='sideways')", "allow(kind=...) must be one of*"),
    ("allow_sync(reason='x', api='cudaStreamSync')",
     "allow(api=...) must be one of cudaStreamSynchronize, *, got 'cudaStreamSync'"),
    ("syncguard(mode='loud')", "mode: 'loud' is not one of fail, warn, record"),
])
def test_bad_marker_is_usage_error_at_collection(pytester, run, mark, message):
    pytester.makepyfile(test_m=f"""
        import pytest
        @pytest.mark.{mark}
        def test_x(): pass
    """)
    res = run("--syncguard", FAKE)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines([f"ERROR: test_m.py::test_x: @pytest.mark.{mark.split('(')[0]}: {message}"])


def test_bad_marker_under_xdist_is_the_same_usage_error(pytester, run):
    """Why: under -n 2 a bad marker was a worker's collection error: the other modules' tests
    ran and the run exited 1, where a serial run stops at collection with exit 4 and one line."""
    pytester.makepyfile(test_m="""
        import pytest
        @pytest.mark.syncguard(mode='loud')
        def test_x(): pass
    """, test_ok="def test_ok(): pass")
    res = run("--syncguard", FAKE, "--syncguard-report=r.json", "-n", "2")
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str() + res.stderr.str()
    res.stderr.fnmatch_lines(["ERROR: test_m.py::test_x: @pytest.mark.syncguard: mode: 'loud' is "
                              "not one of fail, warn, record"])
    assert not (pytester.path / "r.json").exists()  # bad input changes nothing, as serially


def test_allow_sync_max_and_kind(pytester, run):
    pytester.makepyfile(test_m="""
        import pytest
        from syncguard.testing import fake_sync  # FAKE detector: plumbing only

        @pytest.mark.allow_sync(reason="one readback", max=1)
        def test_over_max():
            fake_sync()
            fake_sync()

        @pytest.mark.allow_sync(reason="device sync only", kind="device_sync")
        def test_other_kind():
            fake_sync(kind="stream_sync")
    """)
    run("--syncguard", FAKE, "--syncguard-report=r.json").assert_outcomes(failed=2)
    t = _tests(_doc(pytester))
    assert (len(t["test_over_max"]["allowed"]), len(t["test_over_max"]["syncs"])) == (1, 1)
    assert "exceeds allow(max=1)" in t["test_over_max"]["syncs"][0]["note"]
    assert t["test_other_kind"]["allowed"] == []


def test_fixture_forbid_allow_and_measurements(pytester, run):
    pytester.makepyfile(test_m="""
        import pytest
        from syncguard.testing import fake_sync  # FAKE detector: plumbing only

        def test_part(syncguard, request):
            fake_sync()  # outside the fixture's blocks: not this test's concern
            syncguard.record("peak_mb", 12.5)
            request.node.user_properties.append(("syncguard_measurements", {"steps": 3}))
            with syncguard.allow("readback"):
                with syncguard.forbid():
                    fake_sync()
            with pytest.raises(Exception, match="1 sync"):
                with syncguard.forbid():
                    fake_sync(kind="device_sync", api="cudaDeviceSynchronize")

        def test_bad_measurement(syncguard):
            syncguard.record("obj", object())
    """)
    res = run("--syncguard", "--syncguard-mode=record", FAKE, "--syncguard-report=r.json")
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(["*TypeError: syncguard.record('obj', ...): object is not JSON serial*"])
    t = _tests(_doc(pytester))["test_part"]
    assert t["measurements"] == {"steps": 3, "peak_mb": 12.5}
    # the fixture's two blocks only: the allowed readback and the caught device sync
    assert [e["kind"] for e in t["syncs"]] == ["device_sync"] and len(t["allowed"]) == 1


FIXTURE_README = """
    from syncguard.testing import fake_sync  # FAKE detector: plumbing only

    def setup_that_may_sync():
        fake_sync(op="aten::_local_scalar_dense")

    def step(sync=False):
        if sync:
            fake_sync(op="aten::nonzero")

    def test_part(syncguard):                  # the README's example
        setup_that_may_sync()
        with syncguard.forbid():
            step()

    def test_part_syncs(syncguard):
        setup_that_may_sync()
        with syncguard.forbid():
            step(sync=True)

    def test_whole(syncguard):                 # no block opened: the whole call phase counts
        syncguard.record("n", 1)
        setup_that_may_sync()
"""


def test_fixture_blocks_decide_under_syncguard_as_the_readme_says(pytester, run):
    """README: under ``pytest --syncguard`` a test that opens forbid()/audit() through the fixture
    is judged by those blocks only; a test that opens none is audited as a whole."""
    pytester.makepyfile(test_m=FIXTURE_README)
    res = run("--syncguard", FAKE, "--syncguard-report=r.json")
    res.assert_outcomes(passed=1, failed=2)
    t = _tests(_doc(pytester))
    assert t["test_part"]["audit"] == "clean" and t["test_part"]["outcome"] == "passed"
    assert t["test_part_syncs"]["outcome"] == "failed"
    assert [e["lineno"] for e in t["test_part_syncs"]["syncs"]] == [_line(FIXTURE_README,
                                                                          'op="aten::nonzero"')]
    assert t["test_whole"]["audit"] == "syncs" and t["test_whole"]["outcome"] == "failed"


def test_allow_sync_api_matches_only_that_api(pytester, run):
    pytester.makepyfile(test_m="""
        import pytest
        from syncguard.testing import fake_sync  # FAKE detector: plumbing only

        @pytest.mark.allow_sync(reason="event wait", api="cudaEventSynchronize")
        def test_same_api():
            fake_sync(kind="event_sync", api="cudaEventSynchronize")

        @pytest.mark.allow_sync(reason="event wait", api="cudaEventSynchronize")
        def test_other_api():
            fake_sync(kind="stream_sync", api="cudaStreamSynchronize")
    """)
    res = run("--syncguard", FAKE)
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(["FAILED test_m.py::test_other_api*"])


# -- report ------------------------------------------------------------------------------------

@pytest.mark.parametrize("where, why", [
    ("afile/r.json", "*afile is a file, not a folder)"),
    ("afile/deeper/r.json", "*afile is a file, not a folder)"),
    ("adir", "*adir is a folder, not a file)"),
    ("/proc/r.json", "*cannot create a file in /proc: *"),
])
def test_unwritable_report_path_is_a_usage_error_before_any_test(pytester, run, where, why):
    (pytester.path / "afile").write_text("not a folder")
    pytester.mkdir("adir")
    pytester.makepyfile(test_m="""
        def test_runs():
            open("ran.txt", "w").close()
    """)
    res = run("--syncguard", FAKE, f"--syncguard-report={where}")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert [x for x in res.errlines if x.strip()] == [
        x for x in res.errlines if x.startswith(
            f"ERROR: syncguard: command line option --syncguard-report: '{where}': ")]
    res.stderr.fnmatch_lines([f"ERROR: syncguard: command line option --syncguard-report: '{where}': "
                              f"cannot write there {why}"])
    assert "Traceback" not in res.stderr.str() and not (pytester.path / "ran.txt").exists()
    assert sorted(p.name for p in pytester.path.iterdir() if p.name.startswith(".")) == []


def test_require_cuda_fails_a_session_that_audited_nothing(pytester, run):
    """On this CPU machine the default detectors audit nothing (they need CUDA): the gate must not
    be green. The FAKE detector counts as audited, so the same option passes there."""
    pytester.makepyfile(test_m="def test_a(): pass\ndef test_b(): pass\n")
    res = run("--syncguard", NO_PREDICT, "--syncguard-require-cuda")
    assert res.ret == pytest.ExitCode.TESTS_FAILED
    res.assert_outcomes(passed=2)
    res.stdout.fnmatch_lines(["*= syncguard =*",
                              "syncguard: FAILED: --syncguard-require-cuda: no test could be "
                              "audited (CUDA is not available*); the session fails",
                              "NO TEST WAS AUDITED: 2 not audited (no CUDA; not predicted: "
                              "--syncguard-predict=off)"])
    pytester.makeini("[pytest]\nsyncguard_require_cuda = true\n")
    assert run("--syncguard", NO_PREDICT).ret == pytest.ExitCode.TESTS_FAILED  # the ini twin
    assert run("--syncguard", FAKE).ret == pytest.ExitCode.OK
    pytester.makeini("[pytest]\n")
    res = run("--syncguard", NO_PREDICT)  # without the option: green, but the summary says so
    assert res.ret == pytest.ExitCode.OK
    res.stdout.fnmatch_lines(["*= syncguard =*", "NO TEST WAS AUDITED: 2 not audited (no CUDA*"])



def test_report_schema_and_no_cuda(pytester, run):
    pytester.makepyfile(test_m="""
        import pytest
        def test_a(): pass
        @pytest.mark.skip(reason="nope")
        def test_skipped(): pass
        @pytest.mark.xfail
        def test_xf(): assert 0
    """)
    # default detectors on this CPU-only machine: nothing can be audited, nothing fails for it
    res = run("--syncguard", NO_PREDICT, "--syncguard-report=sub/r.json")
    res.assert_outcomes(passed=1, skipped=1, xfailed=1)
    doc = _doc(pytester, "sub/r.json")
    assert doc["complete"] is True and doc["options"]["detectors"] == list(DETECTORS)
    t = _tests(doc)
    for entry in t.values():  # weaker: written only for a test judged by weaker detectors
        assert tuple(entry) == tuple(f for f in sessionfile.TEST_FIELDS if f != "weaker")
    assert t["test_a"]["audit"] == "not_audited" and "CUDA is not available" in t["test_a"]["reason"]
    assert (t["test_skipped"]["outcome"], t["test_skipped"]["audit"]) == ("skipped", "off")
    assert t["test_xf"]["outcome"] == "xfailed"
    assert doc["summary"] == {"tests": 3, "audited": 0, "clean": 0, "with_syncs": 0, "allowed": 0,
                              "not_audited": 2, "syncs": 0, "outside_scope": 0}
    res.stdout.fnmatch_lines(["*2 not audited (no CUDA*",
                              "not audited because: CUDA is not available*"])
    assert not list((pytester.path / "sub").glob(".r.json.*"))  # no temp file left behind


def test_interrupt_and_sys_exit_leave_valid_report_and_no_region(pytester, run):
    pytester.makepyfile(test_m="""
        import sys
        from syncguard.testing import fake_sync  # FAKE detector: plumbing only

        def test_a():
            fake_sync()

        def test_exit():
            sys.exit(3)

        def test_ctrl_c():
            fake_sync()
            raise KeyboardInterrupt

        def test_never():
            pass
    """)
    res = run("--syncguard", "--syncguard-mode=record", FAKE, "--syncguard-report=r.json",
              no_reraise_ctrlc=True)
    assert res.ret == pytest.ExitCode.INTERRUPTED
    doc = _doc(pytester)
    assert doc["complete"] is False
    t = _tests(doc)
    assert sorted(t) == ["test_a", "test_exit"] and t["test_exit"]["outcome"] == "failed"
    from syncguard.regions import region as scope
    assert scope._regions.get() == () and scope._allows.get() == ()


def test_warmup_hook_runs_once_per_process(pytester, run):
    pytester.makepyfile(sgwarm="CALLS = []\ndef warm():\n    CALLS.append(1)\n")
    pytester.makepyfile(test_m="""
        import pytest, sgwarm

        def test_a():
            assert sgwarm.CALLS == [1]

        def test_b():
            assert sgwarm.CALLS == [1]
    """)
    pytester.makeini("[pytest]\nsyncguard_warmup = sgwarm:warm\n")
    pytester.syspathinsert()
    run("--syncguard", FAKE).assert_outcomes(passed=2)
    pytester.makeini("[pytest]\nsyncguard_warmup = sgwarm:CALLS\n")
    res = run("--syncguard", FAKE)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stdout.fnmatch_lines(["*syncguard: ini option syncguard_warmup (*tox.ini): 'sgwarm:CALLS' is not "
                              "callable*"])
    res.assert_outcomes()  # stopped before the first audited test ran


def test_warmup_hookspec_runs_once_before_the_first_audited_test(pytester, run):
    """``pytest_syncguard_warmup`` in a conftest: called once per process, with the config,
    before the first audited test and never for a run that audits nothing."""
    pytester.makeconftest("""
        CALLS = []
        def pytest_syncguard_warmup(config):
            CALLS.append(config.getoption("syncguard_mode"))
    """)
    pytester.makepyfile(test_m="""
        import pytest, conftest

        @pytest.mark.no_syncguard
        def test_0_not_audited():
            assert conftest.CALLS == []

        def test_a():
            assert conftest.CALLS == ["record"]

        def test_b():
            assert conftest.CALLS == ["record"]
    """)
    run("--syncguard", "--syncguard-mode=record", FAKE).assert_outcomes(passed=3)
    pytester.makepyfile(test_m="""
        import conftest
        def test_plain():
            assert conftest.CALLS == []
    """)
    run().assert_outcomes(passed=1)  # syncguard off: no warm-up


# -- hypothesis --------------------------------------------------------------------------------

HYPO = """
    from hypothesis import given, settings, strategies as st
    from syncguard.testing import fake_sync  # FAKE detector: plumbing only

    @settings(max_examples=40, database=None, deadline=None)
    @given(st.integers(0, 1000))
    def test_h(n):
        if n >= 17:
            fake_sync(op="aten::_local_scalar_dense")
"""


def test_hypothesis_fail_mode_shrinks_to_smallest_syncing_input(pytester, run):
    """Asserts on what hypothesis ran (each n, in order, logged by the test) and the outcome, not
    on hypothesis's wording, which changes between releases."""
    source = HYPO.replace("    def test_h(n):\n",
                          "    def test_h(n):\n        open('seen.txt', 'a').write(f'{n}\\n')\n")
    pytester.makepyfile(test_m=source)
    res = run("--syncguard", FAKE, "--syncguard-report=r.json")
    res.assert_outcomes(failed=1)
    seen = [int(x) for x in (pytester.path / "seen.txt").read_text().split()]
    assert any(n > 17 for n in seen)  # it found a larger failing input first ...
    assert seen[-1] == 17  # ... and the final replay is the smallest input that syncs
    t = _tests(_doc(pytester))["test_h"]
    assert len(t["syncs"]) == 1 and t["syncs"][0]["lineno"] == _line(source, "fake_sync(")
    assert t["examples"] > 1


def test_hypothesis_record_mode_lists_each_site_once(pytester, run):
    pytester.makepyfile(test_m=HYPO)
    run("--syncguard", "--syncguard-mode=record", FAKE, "--syncguard-report=r.json"
        ).assert_outcomes(passed=1)
    t = _tests(_doc(pytester))["test_h"]
    assert t["examples"] == 40 and len(t["syncs"]) == 1 and t["audit"] == "syncs"


def test_hypothesis_deadline_suspended_while_auditing(pytester, run):
    pytester.makepyfile(test_m="""
        import time
        from hypothesis import Phase, example, given, settings, strategies as st

        class TestSlow:
            @settings(phases=[Phase.explicit], database=None, deadline=1)
            @given(st.integers())
            @example(0)
            def test_slow(self, n):
                time.sleep(0.01)  # over the 1 ms deadline: only auditing's suspension saves it

        def test_settings_restored():
            assert TestSlow.test_slow._hypothesis_internal_use_settings.deadline.total_seconds() == 0.001
    """)
    run("-p", "no:syncguard.plugin", "-p", "no:syncguard").assert_outcomes(failed=1, passed=1)
    run("--syncguard", FAKE).assert_outcomes(passed=2)


# -- xdist, sticky errors, isolation (subprocesses) --------------------------------------------

def _compare_reports():
    """samples/compare_reports.py, the script the GPU proof run uses, loaded by path."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("compare_reports",
                                                  ROOT / "samples" / "compare_reports.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.compare


def _typed(doc):
    """A document as load_document returns it: each test a TestEntry."""
    return {**doc, "tests": [sessionfile.TestEntry.from_dict(t) for t in doc["tests"]]}


def _extras(doc):
    return {t["nodeid"]: (t["examples"], t["measurements"]) for t in doc["tests"]}


def test_xdist_merges_workers_into_one_report(pytester, run):
    pytester.makepyfile(test_m=SYNCING, test_h=HYPO, test_r="""
        import pytest
        @pytest.mark.parametrize("i", range(6))
        def test_p(i, syncguard):
            syncguard.record("i", i)
    """)
    common = ("--syncguard", "--syncguard-mode=record", FAKE)
    run(*common, "--syncguard-report=serial.json").assert_outcomes(passed=11)
    res = run(*common, "-n", "2", "--syncguard-report=n2.json", subprocess=True)
    res.assert_outcomes(passed=11)
    serial, n2 = _doc(pytester, "serial.json"), _doc(pytester, "n2.json")
    compare = _compare_reports()
    assert compare(_typed(serial), _typed(n2)) == [] and _extras(serial) == _extras(n2)
    assert len(n2["tests"]) == 11
    judged = next(i for i, t in enumerate(n2["tests"]) if t.get("detectors"))
    fell_back = {**n2, "tests": [dict(t) for t in n2["tests"]]}
    fell_back["tests"][judged]["detectors"] = ["debug", "trace"]  # one worker's region fell back
    assert [d.split(": ", 1)[1].split(":")[0] for d in compare(_typed(serial), _typed(fell_back))
            ] == ["detectors differs"]
    n2["tests"][0]["syncs"].append({"kind": "device_sync", "api": "x", "filename": "f.py", "lineno": 1})
    assert compare(_typed(serial), _typed(n2)) != []  # the comparison can fail
    assert {t["worker"] for t in n2["tests"]} == {"gw0", "gw1"}
    assert n2["complete"] is True and n2["summary"] == serial["summary"]


POISON_CONFTEST = """
    # FAKE sticky CUDA error: replaces the probe for CPU plumbing tests, never touches CUDA.
    import syncguard.pytest_plugin.poison
    POISONED = []
    syncguard.pytest_plugin.poison.sticky_error = lambda: POISONED[0] if POISONED else None
"""
POISON_TESTS = """
    import os, pytest, conftest

    def test_1_culprit():
        conftest.POISONED.append("CUDA error: device-side assert triggered (fake)")

    @pytest.mark.parametrize("i", range(3))
    def test_2_later(i):
        pass

    @pytest.mark.no_syncguard
    def test_3_cpu_only():
        pass
"""


def test_sticky_error_serial_blames_culprit(pytester, run):
    pytester.makeconftest(POISON_CONFTEST)
    pytester.makepyfile(test_m=POISON_TESTS)
    res = run("--syncguard", FAKE, "--syncguard-report=r.json")
    res.assert_outcomes(failed=1, errors=3, passed=1)
    res.stdout.fnmatch_lines_random([
        "*this test left the CUDA context poisoned (CUDA error: device-side*",
        "*ERROR at setup of test_2_later[[]2[]]*",
        "syncguard: not run: the CUDA context of this process was poisoned by test_m.py::test_1_culprit*"])
    t = _tests(_doc(pytester))
    assert t["test_1_culprit"]["reason"].startswith("left the CUDA context poisoned")
    assert t["test_2_later[0]"]["outcome"] == "error"
    assert t["test_3_cpu_only"]["outcome"] == "passed"


def test_sticky_error_xdist_replaces_worker_and_crash_is_recorded(pytester, run):
    pytester.makeconftest(POISON_CONFTEST)
    pytester.makepyfile(test_m=POISON_TESTS, test_z_crash="""
        import os
        def test_crash():
            os._exit(7)  # a real worker crash, unrelated to syncguard
    """)
    # one worker: the tests after the culprit are queued on the worker that must be replaced
    res = run("--syncguard", FAKE, "--syncguard-report=r.json", "-n", "1", subprocess=True)
    res.assert_outcomes(failed=2, passed=4)  # culprit + crash; the culprit is counted once
    res.stdout.fnmatch_lines_random([
        "syncguard: ended worker gw0 after test_m.py::test_1_culprit poisoned its CUDA context*"
        "test_m.py::test_2_later[[]0[]] was not started there and runs on a fresh worker",
        "*worker 'gw*' crashed while running 'test_z_crash.py::test_crash'"])
    t = _tests(_doc(pytester))
    assert [t[f"test_2_later[{i}]"]["outcome"] for i in range(3)] == ["passed"] * 3
    assert t["test_2_later[0]"]["worker"] != "gw0"
    assert t["test_crash"]["audit"] == "off" and "crashed" in t["test_crash"]["reason"]
    assert (t["test_1_culprit"]["outcome"], t["test_1_culprit"]["worker"]) == ("failed", "gw0")


def test_isolate_runs_audited_tests_in_subprocesses(pytester, run):
    pytester.makeconftest(POISON_CONFTEST)
    pytester.makepyfile(test_m="""
        import os, pytest, conftest
        from syncguard.testing import fake_sync  # FAKE detector: plumbing only

        def test_1_culprit():
            conftest.POISONED.append("CUDA error: device-side assert triggered (fake)")

        def test_2_after(syncguard):
            syncguard.record("pid", os.getpid())
            fake_sync()

        @pytest.mark.no_syncguard
        def test_3_here():
            assert not conftest.POISONED  # the culprit's poison stayed in its subprocess
    """)
    res = run("--syncguard", "--syncguard-mode=record", FAKE, "--syncguard-isolate",
              "--syncguard-report=r.json")
    res.assert_outcomes(failed=1, passed=2)
    t = _tests(_doc(pytester))
    assert t["test_2_after"]["audit"] == "syncs" and t["test_2_after"]["outcome"] == "passed"
    assert t["test_2_after"]["measurements"]["pid"] != os.getpid()
    assert "own subprocess" in res.stdout.str()


def test_isolate_without_cuda_starts_no_subprocess(pytester, run):
    """Default (real) detectors on this CPU-only machine: no CUDA context exists to poison, so the
    audited tests run in this process (their pid is pytest's) and the summary says why."""
    pytester.makepyfile(test_m="""
        import os

        def test_a(syncguard):
            syncguard.record("pid", os.getpid())
    """)
    res = run("--syncguard", NO_PREDICT, "--syncguard-isolate", "--syncguard-report=r.json")
    res.assert_outcomes(passed=1)
    assert _tests(_doc(pytester))["test_a"]["measurements"]["pid"] == os.getpid()
    res.stdout.fnmatch_lines(["--syncguard-isolate: no subprocesses, CUDA is not available*"])


# -- phases (issue 13) -------------------------------------------------------------------------

PHASE_TESTS = """
    import pytest
    from syncguard.testing import fake_sync  # FAKE detector: plumbing only

    # the phase a real detector reads from the stack is given by hand (FAKE)
    def test_compile():
        fake_sync(op="fake::compile", phase="compile")

    def test_capture():
        fake_sync(op="fake::capture", phase="graph_capture")

    def test_run():
        fake_sync(op="aten::nonzero")

    @pytest.mark.syncguard(fail_on_phase="graph_capture")
    def test_capture_marked():
        fake_sync(op="fake::capture", phase="graph_capture")

    def test_fixture_block(syncguard):
        with syncguard.forbid():  # the region the fixture opens follows the option too
            fake_sync(op="fake::compile", phase="compile")
"""


def test_compile_and_capture_syncs_are_shown_not_failing_by_default(pytester, run):
    pytester.makepyfile(test_m=PHASE_TESTS)
    res = run("--syncguard", FAKE, "--syncguard-report=r.json")
    res.assert_outcomes(passed=3, failed=2)
    res.stdout.fnmatch_lines(["FAILED test_m.py::test_run*", "FAILED test_m.py::test_capture_marked*"],
                             consecutive=False)
    t = _tests(_doc(pytester))
    assert (t["test_compile"]["audit"], t["test_compile"]["syncs"]) == ("allowed", [])
    moved = t["test_compile"]["allowed"][0]
    assert moved["phases"] == {"compile": 1} and moved["lineno"] == _line(PHASE_TESTS, "fake::compile")
    assert "--syncguard-fail-on-phase=compile" in moved["reason"]
    assert t["test_capture_marked"]["syncs"][0]["phases"] == {"graph_capture": 1}  # per-site record
    assert t["test_fixture_block"]["allowed"][0]["phases"] == {"compile": 1}
    res.stdout.fnmatch_lines([
        "3 sync site(s) while compiling or capturing CUDA graphs (shown, not failing*",
        f"*test_m.py:{_line(PHASE_TESTS, 'fake::compile')}  [[]compile] stream_sync fake::compile  "
        "hint: torch.compile syncs*"])


@pytest.mark.parametrize("args, ini", [(["--syncguard-fail-on-phase=compile,graph_capture"], ""),
                                       ([], "syncguard_fail_on_phase = compile, graph_capture")])
def test_fail_on_phase_option_and_ini_twin(pytester, run, args, ini):
    pytester.makepyfile(test_m=PHASE_TESTS)
    pytester.makeini(f"[pytest]\n{ini}\n")
    res = run("--syncguard", FAKE, "--syncguard-report=r.json", *args)
    res.assert_outcomes(failed=5)
    assert _doc(pytester)["options"]["fail_on_phase"] == ["compile", "graph_capture"]


def test_fail_on_phase_hypothesis_examples(pytester, run):
    """Per-example judging follows the same rule: a compile-phase sync does not fail an example."""
    pytester.makepyfile(test_m="""
        from hypothesis import given, settings, strategies as st
        from syncguard.testing import fake_sync  # FAKE detector: plumbing only

        @settings(max_examples=10, database=None, deadline=None)
        @given(st.integers(0, 5))
        def test_h(n):
            fake_sync(op="fake::compile", phase="compile")
    """)
    run("--syncguard", FAKE).assert_outcomes(passed=1)
    run("--syncguard", FAKE, "--syncguard-fail-on-phase=compile").assert_outcomes(failed=1)


def test_bad_fail_on_phase_is_a_usage_error(pytester, run):
    pytester.makepyfile("def test_x(): pass")
    res = run("--syncguard", "--syncguard-fail-on-phase=linking")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["ERROR: syncguard: command line option --syncguard-fail-on-phase: "
                              "unknown phase(s) [[]'linking'[]]; choose from compile, graph_capture*"])


# -- which detector ran, said once (issue 16) --------------------------------------------------

def test_detector_reason_is_said_once_and_per_test_where_it_differs(pytester, run):
    """FAKE: the registry's resolve() is wrapped to give a fallback reason to one test, as a
    CUPTI subscriber held elsewhere would; the region's reason must reach the JSON and summary."""
    pytester.makeconftest("""
        import pytest
        import syncguard.detectors as registry

        @pytest.fixture(autouse=True)
        def fallback(request, monkeypatch):  # undone after each test: pytester runs in-process
            resolve = registry.resolve
            if "fallback" in request.node.name:
                monkeypatch.setattr(registry, "resolve", lambda requested: (
                    resolve(requested)[0], "fake: cuda detector not used (stand-in)"))
    """)
    pytester.makepyfile(test_m="""
        from syncguard.testing import fake_sync
        def test_a(): pass
        def test_b(): pass
        def test_fallback(): pass
    """)
    res = run("--syncguard", FAKE, "--syncguard-report=r.json")
    res.assert_outcomes(passed=3)
    raw = sessionfile.read_json(pytester.path / "r.json")
    assert raw["provenance"]["detectors_ran"] == "fake (as asked)"
    by_id = {t["nodeid"].split("::")[-1]: t for t in raw["tests"]}
    assert "detector_reason" not in by_id["test_a"]
    assert by_id["test_fallback"]["detector_reason"] == "fake: cuda detector not used (stand-in)"
    assert _tests(_doc(pytester))["test_a"]["detector_reason"] == "fake (as asked)"  # from the top
    res.stdout.fnmatch_lines(["detectors: fake (as asked)",
                              "  1 test(s) under other detectors: fake: cuda detector not used*"])
    assert sum("detectors: fake (as asked)" in line for line in res.outlines) == 1



def test_each_audited_test_names_the_detectors_that_judged_it(pytester, run):
    """Why: the gate compares them per test with the baseline's (one test's region can fall back
    while the run's others do not), and the prose detector_reason does not name them all (an
    ``auto`` resolved to cuda says "cuda: ..." whatever else ran beside it, races too)."""
    pytester.makepyfile(test_m="""
        import pytest
        def test_a(): pass
        @pytest.mark.syncguard(detectors="fake,trace")
        def test_marked(): pass
        @pytest.mark.syncguard(races=True)
        def test_races(): pass
        @pytest.mark.skip(reason="nope")
        def test_skipped(): pass
    """)
    run("--syncguard", FAKE, "--syncguard-report=r.json").assert_outcomes(passed=3, skipped=1)
    raw = sessionfile.read_json(pytester.path / "r.json")
    assert raw["schema_version"] == 5
    by_id = {t["nodeid"].split("::")[-1]: t for t in raw["tests"]}
    assert [by_id[n]["detectors"] for n in ("test_a", "test_marked", "test_races")] == [
        ["fake"], ["fake", "trace"], ["fake", "races"]]
    assert "detectors" not in by_id["test_skipped"]  # not audited: no detectors judged it
    assert _tests(_doc(pytester))["test_marked"]["detectors"] == ["fake", "trace"]
    # xdist: each worker's entries cross execnet and are read back by the controller
    run("--syncguard", FAKE, "--syncguard-report=n2.json", "-n", "2",
        subprocess=True).assert_outcomes(passed=3, skipped=1)
    n2 = _tests(_doc(pytester, "n2.json"))
    assert {n: t.get("detectors") for n, t in n2.items()} == {
        n: t.get("detectors") for n, t in by_id.items()}


def test_a_profile_test_runs_in_its_own_process_without_the_isolate_option(pytester, run):
    """FAKE detector alongside profile (CPU: the profiler runs on the CPU only): a test whose
    detectors include profile runs in a child, so the profiler never runs in the session's
    process (CUPTI would keep its subscriber there and the cuda detector could not subscribe)."""
    pytester.makepyfile(test_m="""
        import os, pytest

        @pytest.mark.syncguard(detectors="fake,profile")
        def test_profiled(syncguard):
            syncguard.record("pid", os.getpid())

        def test_plain(syncguard):
            syncguard.record("pid", os.getpid())
    """)
    res = run("--syncguard", FAKE, "--syncguard-report=r.json")
    res.assert_outcomes(passed=2)
    t = _tests(_doc(pytester))
    assert t["test_profiled"]["measurements"]["pid"] != os.getpid()
    assert t["test_plain"]["measurements"]["pid"] == os.getpid()
    assert "--syncguard-isolate" not in res.stdout.str()


# -- found by trying the plugin as a new user would (each failed before its fix) ---------------

def test_every_setting_reaches_an_isolated_child_through_its_command_line(pytester):
    """options.command_line, then the option parser and resolve_settings of a fresh config: the
    same Settings back. The values are chosen here, each off its default, for every field the
    table carries (a field added to Settings without a value here fails the first assert)."""
    import dataclasses

    from syncguard.pytest_plugin.options import Settings, command_line, resolve_settings
    chosen = Settings(enabled=True, mode="warn", detectors=("debug", "trace"), races=True,
                      require_cuda=True, fail_on_phase=("compile",), scope=("src", "lib"),
                      ignore=("src/util.py",), keep_events=True, max_stacks=0, predict=True,
                      predict_why="--syncguard-predict=on", predict_torch="2.11")  # the child is told the decision
    unsent = {"report", "isolate", "warmup", "child"}  # the child's own, or not an option
    default = Settings()
    assert {f.name for f in dataclasses.fields(Settings)
            if getattr(chosen, f.name) == getattr(default, f.name)} == unsent
    pytester.makeini("[pytest]\nsyncguard_mode = record\nsyncguard_keep_events = false\n")
    config = pytester.parseconfig(*_plugin_args(), *command_line(chosen, skip=(
        "syncguard_report", "syncguard_isolate")))
    assert resolve_settings(config) == chosen


ISOLATED_OPTIONS = """
    import os
    from syncguard.testing import fake_sync  # FAKE detector: plumbing only

    def test_own_sync():
        fake_sync()

    def test_compile_sync():
        fake_sync(phase="compile")

    def test_device(request, syncguard):
        syncguard.record("pid", os.getpid())
        assert request.config.getoption("device") == "cuda"
"""


def test_isolated_tests_are_judged_by_the_sessions_options_and_see_its_conftest_options(
        pytester, run):
    pytester.makeconftest("def pytest_addoption(parser):\n"
                          "    parser.getgroup('mine').addoption('--device', default='cpu')\n")
    pytester.makepyfile(test_i=ISOLATED_OPTIONS)
    args = ("--syncguard", FAKE, "--syncguard-scope=*", "--syncguard-fail-on-phase=compile",
            "--syncguard-keep-events", "--device", "cuda", "--syncguard-report=r.json")
    serial = run(*args)
    serial.assert_outcomes(passed=1, failed=2)
    serial_doc = _tests(_doc(pytester))
    isolated = run(*args, "--syncguard-isolate")
    isolated.assert_outcomes(passed=1, failed=2)
    doc = _tests(_doc(pytester))
    assert serial_doc["test_device"]["measurements"]["pid"] == os.getpid()
    assert doc["test_device"]["measurements"]["pid"] != os.getpid()  # it ran in a child
    for name in ("test_own_sync", "test_compile_sync", "test_device"):
        assert (doc[name]["outcome"], doc[name]["audit"], len(doc[name].get("events", ()))) == (
            serial_doc[name]["outcome"], serial_doc[name]["audit"],
            len(serial_doc[name].get("events", ()))), name
    assert len(doc["test_own_sync"]["events"]) == 1


def test_a_usage_error_leaves_the_last_report_as_it_was(pytester, run):
    pytester.makepyfile(test_a="def test_a(): pass")
    run("--syncguard", FAKE, "--syncguard-report=r.json").assert_outcomes(passed=1)
    before = (pytester.path / "r.json").read_bytes()
    pytester.makepyfile(test_b="""
        import pytest

        @pytest.mark.syncguard(mode="loud")
        def test_b(): pass
    """)
    res = run("--syncguard", FAKE, "--syncguard-report=r.json")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert (pytester.path / "r.json").read_bytes() == before
    res = run("--syncguard", FAKE, "--syncguard-report=new.json", "no_such_test_file.py")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert not (pytester.path / "new.json").exists()  # there was none before


def test_a_module_that_fails_to_collect_makes_the_report_incomplete(pytester, run):
    pytester.makepyfile(test_ok="def test_ok(): pass", test_broken="import no_such_module_x")
    for extra in (["--continue-on-collection-errors"], ["-n", "2"]):
        res = run("--syncguard", FAKE, "--syncguard-report=r.json", *extra)
        assert res.ret != pytest.ExitCode.OK
        doc = _doc(pytester)
        assert doc["complete"] is False and list(_tests(doc)) == ["test_ok"], extra


def test_collect_only_writes_no_report_and_is_not_gated(pytester, run):
    pytester.makepyfile(test_a="def test_a(): pass")
    run("--syncguard", FAKE, "--syncguard-report=r.json").assert_outcomes(passed=1)
    before = (pytester.path / "r.json").read_bytes()
    for extra in ([], ["-n", "2"]):
        res = run("--co", "--syncguard", "--syncguard-require-cuda", "--syncguard-report=r.json",
                  *extra)
        assert res.ret == pytest.ExitCode.OK, res.stdout.str()
        assert "require-cuda" not in res.stdout.str()
        assert (pytester.path / "r.json").read_bytes() == before


def test_the_ini_warm_up_is_imported_only_when_a_test_is_audited(pytester, run):
    pytester.makepyfile(sgboom="raise RuntimeError('imported')\ndef warm(): pass\n",
                        test_a="def test_a(): pass")
    pytester.makeini("[pytest]\nsyncguard_warmup = sgboom:warm\n")
    pytester.syspathinsert()
    run().assert_outcomes(passed=1)
    assert run("--co").ret == pytest.ExitCode.OK
    res = run("--syncguard", FAKE)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stdout.fnmatch_lines(["*syncguard: ini option syncguard_warmup (*tox.ini): cannot load "
                              "'sgboom:warm' (RuntimeError: imported)*"])


def test_help_shows_even_with_a_bad_ini_value(pytester, run):
    pytester.makeini("[pytest]\nsyncguard_mode = loud\n")
    res = run("--help")
    assert res.ret == pytest.ExitCode.OK
    res.stdout.fnmatch_lines(["*--syncguard-mode=fail|warn|record*"])


def test_record_refuses_nan_and_infinity_in_one_line(pytester, run):
    pytester.makepyfile(test_m="""
        import pytest

        @pytest.mark.parametrize("value", [float("nan"), [1.0, float("inf")]])
        def test_m(syncguard, value):
            with pytest.raises(ValueError, match=r"^syncguard.record\\('x', ...\\): .* NaN or "
                                                 r"Infinity, which JSON cannot store$"):
                syncguard.record("x", value)
            syncguard.record("y", 1.5)
    """)
    run("--syncguard", FAKE, "--syncguard-report=r.json").assert_outcomes(passed=2)
    assert [t["measurements"] for t in _doc(pytester)["tests"]] == [{"y": 1.5}] * 2


def test_a_report_path_under_home_is_the_homes(pytester, run, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    pytester.makepyfile(test_a="def test_a(): pass")
    run("--syncguard", FAKE, "--syncguard-report=~/sg.json").assert_outcomes(passed=1)
    assert (tmp_path / "sg.json").is_file() and not (pytester.path / "~").exists()


def test_a_usage_error_after_the_prediction_opened_leaves_torch_as_it_was(pytester, run):
    """In-process, as a suite that runs pytest inside its own tests does: the prediction block
    (CUDA stand-ins, opened with the session) was left open when a later check of the session
    failed, and the outer process went on making "CUDA" tensors on a CPU build."""
    is_available = torch.cuda.is_available
    swap = torch.__future__.get_swap_module_params_on_conversion()
    asked = torch.nn.modules.module.is_traceable_wrapper_subclass
    (pytester.path / "a-file").write_text("")
    pytester.makepyfile(test_a="def test_a(): pass")
    res = run("--syncguard", "--syncguard-predict", "--syncguard-report=a-file/r.json")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert torch.cuda.is_available is is_available
    assert torch.__future__.get_swap_module_params_on_conversion() == swap
    assert torch.nn.modules.module.is_traceable_wrapper_subclass is asked
    if not is_available():  # a CPU build makes no CUDA tensor, stand-in or not
        with pytest.raises((AssertionError, RuntimeError)):
            torch.ones(2, device="cuda")


def test_a_suite_that_never_imports_torch_runs_without_it(pytester, run):
    """Found dropping the plugin into numpy's suite: the report's environment imported torch
    before collection, and a numpy pickle test that walks sys.modules failed (torch.classes
    raises on attribute lookup). A fresh interpreter: the inner test sees no torch; the report
    still names torch, imported once every test has run. Prediction off: --syncguard-predict=auto
    imports torch before the first conftest to ask whether this machine has CUDA, and prediction
    runs the suite on torch's stand-ins (docs/prediction.md)."""
    pytester.makepyfile(test_m="""
        import sys

        def test_no_torch():
            assert "torch" not in sys.modules
    """)
    res = run("--syncguard", NO_PREDICT, "--syncguard-report=r.json", subprocess=True)
    res.assert_outcomes(passed=1)
    doc = _doc(pytester)
    assert doc["environment"]["torch"] == torch.__version__ and doc["complete"] is True
    (t,) = doc["tests"]
    assert (t["audit"], t["reason"]) == ("not_audited",
                                         "torch is not imported (nothing has used CUDA)")


@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA the audit runs and suspends it")
def test_a_hypothesis_deadline_stays_when_nothing_can_be_audited(pytester, run):
    """Found dropping the plugin into another suite: --syncguard suspended every audited
    hypothesis test's deadline even where no audit could run (no CUDA), and a test that fails
    its deadline passed."""
    pytester.makepyfile(test_m="""
        import time
        from hypothesis import Phase, given, settings, strategies as st

        # no shrink phase: shrinking a deadline failure reruns the slow body many times over
        @settings(deadline=50, max_examples=2, derandomize=True, database=None,
                  phases=[Phase.generate])
        @given(st.integers())
        def test_slow(a):
            time.sleep(0.15)
    """)
    res = run("--syncguard", NO_PREDICT)
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*DeadlineExceeded*"])
