"""The plugin loads little until a run uses syncguard, and still audits whatever it audited.

pytest imports ``syncguard.plugin`` in every run of a venv where syncguard is installed. These
tests look at what that costs in modules (not in time: bench/bench_startup.py measures that) and
that the session still comes up for each way a test can be audited. Inner runs use the FAKE
detector (``syncguard.testing.fake_sync()``), which records a sync on the CPU: they prove the
plumbing, never GPU behaviour.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from test_plugin import run  # noqa: F401  (a fixture)

#: the most syncguard modules that declaring the plugin may load (the package, the entry point,
#: the pytest_plugin package, its option declarations and its hookspecs)
MOST_MODULES = 5

#: modules that only a run using syncguard needs; torch is the costly one
HEAVY = ("syncguard.pytest_plugin.session", "syncguard.pytest_plugin.options",
         "syncguard.regions.region", "syncguard.records.events", "syncguard.detectors", "torch")


def test_importing_the_plugin_loads_few_modules_and_not_torch():
    code = ("import json, sys; import syncguard.plugin; "
            "print(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    ours = [m for m in loaded if m == "syncguard" or m.startswith("syncguard.")]
    assert "syncguard.plugin" in ours  # the import did happen
    assert len(ours) <= MOST_MODULES, ours
    assert "torch" not in loaded


def test_the_public_names_still_resolve_and_are_listed():
    code = ("import sys, syncguard; before = 'syncguard.regions.region' in sys.modules; "
            "from syncguard import audit, SyncError; "
            "print(before, audit.__module__, SyncError.__module__, 'forbid' in dir(syncguard))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "syncguard.regions.region", "syncguard.records.events",
                                  "True"]


MODULES_SEEN = """
    import json, sys

    def test_x():
        with open("modules.json", "w") as f:
            json.dump(sorted(sys.modules), f)
"""


def test_a_run_without_syncguard_imports_nothing_heavy(pytester, run):
    """The same trivial run with the plugin and with ``-p no:syncguard``: what the plugin added
    is the few declaring modules, none of the heavy ones (whatever other plugins load is in both
    runs, so it does not count here)."""
    pytester.makepyfile(test_m=MODULES_SEEN)
    run(subprocess=True).assert_outcomes(passed=1)
    with_plugin = set(json.loads((pytester.path / "modules.json").read_text()))
    run("-p", "no:syncguard.plugin", "-p", "no:syncguard",
        subprocess=True).assert_outcomes(passed=1)
    without = set(json.loads((pytester.path / "modules.json").read_text()))
    added = with_plugin - without
    assert "syncguard.plugin" in added  # the plugin was loaded in the first run only
    assert all(m == "syncguard" or m.startswith("syncguard.") for m in added), added
    assert len(added) <= MOST_MODULES, added
    assert not set(HEAVY) & added, set(HEAVY) & added


def test_an_option_brings_the_session_up(pytester, run):
    pytester.makepyfile(test_m=MODULES_SEEN)
    run("--syncguard-mode=record", subprocess=True).assert_outcomes(passed=1)
    assert "syncguard.pytest_plugin.session" in json.loads(
        (pytester.path / "modules.json").read_text())


MARKED = """
    import pytest
    from syncguard.testing import fake_sync  # FAKE detector: plumbing only

    def test_plain():
        fake_sync()  # not audited: no marker, no --syncguard

    @pytest.mark.syncguard(detectors=("fake",))
    def test_marked():
        fake_sync()
"""


@pytest.mark.parametrize("extra", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_marker_alone_still_audits(pytester, run, extra):
    """No option at all: the marker seen at collection brings the session up, the marked test's
    fake sync fails it (mode fail) and the summary names it."""
    pytester.makepyfile(test_m=MARKED)
    res = run(*extra, subprocess=True)
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(["*syncguard: test_m.py::test_marked*", "*= syncguard =*"])


@pytest.mark.parametrize("extra", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_bad_marker_alone_is_still_a_usage_error(pytester, run, extra):
    pytester.makepyfile(test_ok="def test_ok(): pass", test_m="""
        import pytest
        @pytest.mark.allow_sync(max=2)
        def test_x(): pass
    """)
    res = run(*extra, subprocess=True)
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str() + res.stderr.str()
    res.stderr.fnmatch_lines(["ERROR: test_m.py::test_x: @pytest.mark.allow_sync: needs reason=*"])


def test_the_fixture_works_without_a_session(pytester, run):
    """No option, no marker: the fixture's own blocks still guard (``forbid`` raises on the fake
    sync) and ``record`` still checks its value, though nothing is reported."""
    pytester.makepyfile(test_m="""
        import pytest
        from syncguard import SyncError
        from syncguard.testing import fake_sync  # FAKE detector: plumbing only

        def test_fixture(syncguard):
            assert syncguard.mode == "fail"
            with pytest.raises(SyncError):
                with syncguard.forbid(detectors=("fake",)):
                    fake_sync()
            with pytest.raises(ValueError, match="NaN"):
                syncguard.record("x", float("nan"))
            syncguard.set_scope("*")  # not audited: nothing to judge, and no error
    """)
    run(subprocess=True).assert_outcomes(passed=1)


def test_names_once_importable_from_the_plugin_still_are():
    import syncguard.plugin as plugin
    from syncguard.pytest_plugin import session

    assert plugin.SyncguardWarning is session.SyncguardWarning
    assert plugin.SyncguardSession is session.SyncguardSession
    with pytest.raises(AttributeError):
        plugin.no_such_name  # noqa: B018
