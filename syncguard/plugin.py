"""pytest plugin: options, markers, the ``syncguard`` fixture, and hooks delegating to session.py.

Nothing here imports torch; a run without ``--syncguard`` (and no syncguard marker) is untouched.
"""
from __future__ import annotations

import argparse
import sys

import pytest

from .session import DEFAULT_DETECTORS, Controller, SyncguardFixture, SyncguardWarning  # noqa: F401

CONTROLLER = pytest.StashKey[Controller]()
_MARKERS = (
    "syncguard(mode=None, detectors=None, races=None): audit this test even without --syncguard, "
    "optionally overriding the session's options",
    "allow_sync(reason, max=None, api=None, kind=None): accept matching syncs in this test; "
    "reason is required",
    "no_syncguard: never audit this test",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("syncguard", "CUDA host<->device sync auditing")
    opts = (
        ("--syncguard", "syncguard", dict(action="store_true", default=None),
         "audit every test's call phase for host<->device syncs"),
        ("--syncguard-mode", "syncguard_mode", dict(metavar="fail|warn|record"),
         "on a sync: fail the test, emit a SyncguardWarning, or only record (default fail)"),
        ("--syncguard-detectors", "syncguard_detectors", dict(metavar="LIST"),
         f"comma-separated detectors (default {','.join(DEFAULT_DETECTORS)})"),
        ("--syncguard-races", "syncguard_races", dict(action="store_true", default=None),
         "also look for cross-stream races"),
        ("--syncguard-report", "syncguard_report", dict(metavar="PATH"),
         "write the session's JSON report to PATH"),
        ("--syncguard-isolate", "syncguard_isolate", dict(action="store_true", default=None),
         "run each audited test in a fresh subprocess (survives sticky CUDA errors)"),
    )
    for flag, dest, kw, help_ in opts:
        group.addoption(flag, dest=dest, help=help_, **kw)
        parser.addini(dest, f"{help_} [ini twin of {flag}]", default="")
    parser.addini("syncguard_warmup", "module:callable run once per process before the first "
                  "audited test, after syncguard's own CUDA warm-up", default="")
    group.addoption("--syncguard-child", dest="syncguard_child", help=argparse.SUPPRESS)


def pytest_configure(config: pytest.Config) -> None:
    for line in _MARKERS:
        config.addinivalue_line("markers", line)
    name = config.pluginmanager.get_name(sys.modules[__name__]) or __name__
    controller = config.stash[CONTROLLER] = Controller(config, name)
    config.pluginmanager.register(_Bound(controller), "syncguard-session")


def _controller(config: pytest.Config) -> Controller:
    return config.stash[CONTROLLER]


def pytest_sessionstart(session: pytest.Session) -> None:
    _controller(session.config).session_start()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _controller(config).collection_modifyitems(items)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    rep = yield
    _controller(collector.config).check_collected(rep)
    return rep


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    c = _controller(item.config)
    c.before_protocol()  # may end a poisoned xdist worker
    if c.wants_isolation(item):
        c.run_isolated(item)
        return True
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _controller(item.config).runtest_setup(item)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item):
    return (yield from _controller(item.config).runtest_call(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    rep = yield
    _controller(item.config).makereport(item, rep)
    return rep


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _controller(session.config).session_finish(session, exitstatus)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    _controller(config).terminal_summary(terminalreporter)


class _Bound:
    """Hooks whose arguments carry no config: registered per run, bound to its controller."""

    def __init__(self, controller: Controller):
        self.c = controller

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.c.logreport(report)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report, sched) -> None:
        self.c.handlecrashitem(crashitem, report, sched)

    def pytest_report_teststatus(self, report):
        if getattr(report, "syncguard_rescheduled", None):
            return "", "", ""  # a test syncguard moved to a fresh worker; its real result follows
        return None


@pytest.fixture
def syncguard(request: pytest.FixtureRequest) -> SyncguardFixture:
    """Guard part of a test (``with syncguard.forbid(): ...``) and record measurements."""
    return SyncguardFixture(request.node, _controller(request.config).settings)
