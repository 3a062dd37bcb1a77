"""The pytest entry point (``pytest11``): options, ini keys, markers, hookspecs and the
``syncguard`` fixture; the session (pytest_plugin/session.py) is the plugin that does the work.

pytest loads this module in every run of a venv where syncguard is installed, so, as
pytest-xdist's ``plugin.py`` does, it only declares and imports its session when a run needs
one. The session comes up in ``pytest_configure`` when any syncguard option or ini key is given
(``--syncguard``, ``syncguard = true``, a report path, a bad value to refuse...), in an xdist
controller (its workers' reports carry syncguard results), or else during collection, at the
first test with a ``syncguard`` or ``allow_sync`` marker (such a test is audited, or its marker
checked, without ``--syncguard``). A run with none of these imports neither torch nor the rest of
syncguard.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import pytest

from syncguard.pytest_plugin import declare

if TYPE_CHECKING:
    from syncguard.pytest_plugin.fixture import SyncguardFixture
    from syncguard.pytest_plugin.options import Settings
    from syncguard.pytest_plugin.session import SyncguardSession

SESSION = pytest.StashKey["SyncguardSession"]()
_SETTINGS = pytest.StashKey["Settings"]()  # resolved for the fixture where no session came up
_PLUGIN_NAME = pytest.StashKey[str]()  # what an --syncguard-isolate child loads with -p


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from syncguard.pytest_plugin import newhooks

    pluginmanager.add_hookspecs(newhooks)


def pytest_addoption(parser: pytest.Parser) -> None:
    declare.add_options(parser)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser, args):
    """Prediction takes effect before the first conftest is imported: suites that read
    ``torch.cuda.is_available()`` at import see the stand-in GPU (pytest_plugin/early.py; the
    session adopts the block). In every process that imports conftests: a serial run, an xdist
    controller and its workers (their command line is the controller's), an isolate child.
    Only where syncguard is on: then ``--syncguard-predict`` (default ``auto``) is decided here,
    once (early.decide; ``auto`` asks torch whether this machine has CUDA)."""
    if not declare.early_values(early_config)[0]:
        return (yield)
    from syncguard.pytest_plugin import early

    decision = early.early_decision(early_config)
    if decision is None or not decision.predict:
        return (yield)
    early.open_block(early_config)
    try:
        return (yield)
    except BaseException:  # a conftest failed to import: no pytest_unconfigure will follow
        early.close(early_config)
        raise


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    if config.getoption("syncguard_child", None):  # an isolate child: before any pytest_configure
        from syncguard.pytest_plugin import isolate

        isolate.take_parent_options(config)


def pytest_configure(config: pytest.Config) -> None:
    for line in declare.MARKERS:
        config.addinivalue_line("markers", line)
    if config.option.help:  # --help runs no test, and must show even where an option is bad
        return
    config.stash[_PLUGIN_NAME] = config.pluginmanager.get_name(sys.modules[__name__]) or __name__
    if declare.anything_given(config) or _is_xdist_controller(config):
        start_session(config)


def _is_xdist_controller(config: pytest.Config) -> bool:
    return (getattr(config.option, "dist", "no") != "no"
            and not hasattr(config, "workerinput"))


def start_session(config: pytest.Config) -> SyncguardSession:
    """Build this process's session and register it (once); it checks every setting."""
    if SESSION in config.stash:
        return config.stash[SESSION]
    from syncguard.pytest_plugin import options
    from syncguard.pytest_plugin.session import SyncguardSession
    from syncguard.pytest_plugin.warmup import IniWarmup

    session = config.stash[SESSION] = SyncguardSession(config, config.stash[_PLUGIN_NAME])
    config.pluginmanager.register(session, "syncguard-session")
    config.pluginmanager.register(session.poison, "syncguard-poison")  # after: its hooks run first
    if session.settings.warmup:
        config.pluginmanager.register(IniWarmup(session.settings.warmup, options.where(
            config, "syncguard_warmup")), "syncguard-ini-warmup")
    return session


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    """The first collected test with a syncguard marker brings the session up. It was not
    registered while this report was made, so what its own wrapper does to a report on an xdist
    worker (a bad marker becomes a collection error) is done here for this one."""
    rep = yield
    config = collector.config
    if (SESSION not in config.stash and _PLUGIN_NAME in config.stash and rep.passed
            and any(isinstance(node, pytest.Item) and declare.wants_session(node)
                    for node in rep.result)):
        session = start_session(config)
        if session.is_worker:
            from syncguard.pytest_plugin.session import _fail_on_bad_markers

            _fail_on_bad_markers(rep, session.settings, session.scope_for)
    return rep


@pytest.fixture
def syncguard(request: pytest.FixtureRequest) -> SyncguardFixture:
    """Guard part of a test (``with syncguard.forbid(): ...``) and record measurements."""
    from syncguard.pytest_plugin.fixture import SyncguardFixture

    config = request.config
    session = config.stash.get(SESSION, None)
    if session is not None:
        return SyncguardFixture(request.node, session.settings, session)
    if _SETTINGS not in config.stash:  # no option given: the defaults, nothing to audit
        from syncguard.pytest_plugin.options import resolve_settings

        config.stash[_SETTINGS] = resolve_settings(config)
    return SyncguardFixture(request.node, config.stash[_SETTINGS])


#: names this module offered before the session was imported lazily, and where they live now
_MOVED = {
    "SyncguardSession": "syncguard.pytest_plugin.session",
    "SyncguardWarning": "syncguard.pytest_plugin.session",
    "STATE": "syncguard.pytest_plugin.session",
    "SyncguardFixture": "syncguard.pytest_plugin.fixture",
    "DEFAULT_DETECTORS": "syncguard.records.events:DETECTORS",
}


def __getattr__(name: str) -> Any:
    """Those names stay importable from here (``-W error::syncguard.plugin.SyncguardWarning``),
    loaded on first use."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module, _, attr = _MOVED[name].partition(":")
    return getattr(importlib.import_module(module), attr or name)
