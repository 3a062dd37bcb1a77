"""``--syncguard-isolate``: run each audited test in a fresh interpreter and replay its reports.

Why: a device-side assert leaves a process's CUDA context unusable ("sticky"), so one bad test
would spoil every later GPU test of its process. A child per test keeps them apart, at the cost of
a new interpreter per test. The child writes its pytest reports as JSON (``--syncguard-child``);
the parent replays them through its own hooks, so terminal output, xdist and the session report
see an ordinary test.

The same child runs a test whose detectors include ``profile`` even without the option: once
torch's profiler has run, CUPTI keeps its subscriber for the life of the process and the default
``cuda`` detector cannot subscribe again (every later region would fall back to ``debug,trace``,
with that reason). A child keeps the profiler away from the session's process.
"""
from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest

from syncguard.pytest_plugin.options import Settings, command_line
from syncguard.regions.region import no_cuda


def cuda_unavailable(detectors: tuple[str, ...]) -> str | None:
    """Why there is no CUDA context to protect, or None. Never creates a context.

    Why: without CUDA no test can poison a context, and a child per test only costs time (a new
    interpreter per test). The fake detector pretends to have CUDA, so the plumbing stays testable.
    """
    if "fake" in detectors:
        return None
    return no_cuda()  # asked after collection, once the suite's modules imported what they use


def wants_isolation(settings: Settings, audited: bool, detectors: tuple[str, ...] = ()) -> bool:
    """Isolate an audited test (all of them under ``--syncguard-isolate``; one whose detectors
    include ``profile`` always, see the module docstring), unless this process is a child."""
    return (settings.isolate or "profile" in detectors) and not settings.child and audited


def child_command(config: pytest.Config, settings: Settings, plugin_name: str, item: pytest.Item,
                  out: Path) -> list[str]:
    """The pytest command line that runs ``item`` alone with this session's syncguard options
    (every one, :func:`options.command_line`), the plugins, warning filters and ``-o`` it was
    given, and the core options that decide how the test is collected."""
    args = config.invocation_params.args
    cmd = [sys.executable, "-m", "pytest", item.nodeid, "-q", "-p", plugin_name,
           f"--rootdir={config.rootpath}", "-p", "no:cacheprovider", f"--syncguard-child={out}",
           *command_line(settings, skip=("syncguard_report", "syncguard_isolate"))]
    if config.inipath:
        cmd.append(f"--config-file={config.inipath}")
    opt = config.option
    cmd.append(f"--import-mode={opt.importmode}")
    cmd += ["--noconftest"] * bool(opt.noconftest) + ["--strict-markers"] * bool(opt.strict_markers)
    if opt.confcutdir:
        cmd.append(f"--confcutdir={opt.confcutdir}")
    for i, a in enumerate(args):  # keep the caller's plugins, warning filters and -o
        if a in ("-p", "-W", "-o") and i + 1 < len(args):
            cmd += [a, args[i + 1]]
        elif a[:2] in ("-p", "-W", "-o") and len(a) > 2 and not a.startswith("--"):
            cmd.append(a)
    if config.pluginmanager.has_plugin("xdist"):
        cmd += ["-n", "0"]  # one test, no workers, even if addopts asks for them
    return cmd


class _DestRecorder:
    """Stands in for pytest's ``Parser`` (and its groups) while a conftest's ``pytest_addoption``
    runs again, keeping the ``dest`` of each option it declares, as pytest names it."""

    def __init__(self) -> None:
        self.dests: list[str] = []

    def getgroup(self, *args: Any, **kw: Any) -> "_DestRecorder":
        return self

    def addoption(self, *names: str, **attrs: Any) -> None:
        long = [n for n in names if n.startswith("--")]
        name = attrs.get("dest") or (long[0][2:] if long else names[0][1:]).replace("-", "_")
        self.dests.append(name)

    _addoption = addoption

    def addini(self, *args: Any, **kw: Any) -> None:
        pass


_CONFTEST_OPTIONS = pytest.StashKey[dict]()


def conftest_options(config: pytest.Config) -> dict[str, Any]:
    """The values of the options the run's conftest.py files declare, where they are plain JSON.

    Why: a conftest option (``--device cuda``) is part of how a test runs, and the isolated child
    must see the value the parent was given. Only conftests': a plugin's options can name files
    that the child must not write over (``--junitxml``, coverage data), and the child loads the
    same plugins with the same ini. Found by running each conftest's ``pytest_addoption`` again
    against a recorder, once per session; a conftest whose hook fails there is passed over.
    """
    if _CONFTEST_OPTIONS in config.stash:
        return config.stash[_CONFTEST_OPTIONS]
    values: dict[str, Any] = {}
    for plugin in config.pluginmanager.get_plugins():
        hook = getattr(plugin, "pytest_addoption", None)
        if Path(str(getattr(plugin, "__file__", ""))).name != "conftest.py" or hook is None:
            continue
        recorder = _DestRecorder()
        offered = {"parser": recorder, "pluginmanager": config.pluginmanager}
        try:
            hook(**{k: v for k, v in offered.items()
                    if k in inspect.signature(hook).parameters})
        except Exception:
            continue
        for dest in recorder.dests:
            value = getattr(config.option, dest, None)
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError):
                continue
            values[dest] = value
    config.stash[_CONFTEST_OPTIONS] = values
    return values


def options_path(out: str | Path) -> Path:
    """Where the parent leaves :func:`conftest_options` for the child writing to ``out``."""
    return Path(out).with_name("options.json")


def take_parent_options(config: pytest.Config) -> None:
    """In an isolate child, before any ``pytest_configure``: the parent's conftest options."""
    child = config.getoption("syncguard_child", None)
    path = options_path(child) if child else None
    if path is not None and path.is_file():
        for dest, value in json.loads(path.read_text(encoding="utf-8")).items():
            setattr(config.option, dest, value)


def run_isolated(item: pytest.Item, settings: Settings, plugin_name: str,
                 on_crash: Callable[[int], Any]) -> None:
    """Run ``item`` in a child (see :func:`child_command`) and replay the child's reports here.

    ``on_crash(returncode)`` gives the session-report entry for a child that died before
    reporting its teardown: the entry itself, made here in this process, where a child's entries
    arrive as dicts on its reports.
    """
    config = item.config
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    with tempfile.TemporaryDirectory(prefix="syncguard-") as tmp:
        out = Path(tmp, "reports.json")
        options_path(out).write_text(json.dumps(conftest_options(config)), encoding="utf-8")
        proc = subprocess.run(child_command(config, settings, plugin_name, item, out),
                              cwd=config.rootpath, capture_output=True, text=True,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            data = json.loads(out.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = []
    reports = [config.hook.pytest_report_from_serializable(config=config, data=d) for d in data]
    reports = [r for r in reports if r is not None and r.nodeid == item.nodeid]
    if not any(r.when == "teardown" for r in reports):
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        rep = pytest.TestReport(
            item.nodeid, item.location, {}, "failed",
            f"syncguard --syncguard-isolate: the subprocess for this test exited with code "
            f"{proc.returncode} before reporting\n{tail}", "call", [], 0.0)
        rep.syncguard_entry = on_crash(proc.returncode)
        reports.append(rep)
    for rep in reports:
        item.ihook.pytest_runtest_logreport(report=rep)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
