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

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import pytest

from .options import Settings


def cuda_unavailable(detectors: tuple[str, ...]) -> str | None:
    """Why there is no CUDA context to protect, or None. Never creates a context.

    Why: without CUDA no test can poison a context, and a child per test only costs time (6x on
    the CPU suite). The fake detector pretends to have CUDA, so the plumbing stays testable.
    """
    if "fake" in detectors:
        return None
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    return None if torch.cuda.is_available() else f"CUDA is not available (torch {torch.__version__})"


def wants_isolation(settings: Settings, audited: bool, detectors: tuple[str, ...] = ()) -> bool:
    """Isolate an audited test (all of them under ``--syncguard-isolate``; one whose detectors
    include ``profile`` always, see the module docstring), unless this process is a child."""
    return (settings.isolate or "profile" in detectors) and not settings.child and audited


def child_command(config: pytest.Config, settings: Settings, plugin_name: str, item: pytest.Item,
                  out: Path) -> list[str]:
    """The pytest command line that runs ``item`` alone with this session's syncguard options."""
    s, args = settings, config.invocation_params.args
    cmd = [sys.executable, "-m", "pytest", item.nodeid, "-q", "-p", plugin_name,
           f"--rootdir={config.rootpath}", "-p", "no:cacheprovider",
           f"--syncguard-child={out}", f"--syncguard-mode={s.mode}",
           f"--syncguard-detectors={','.join(s.detectors)}"]
    if config.inipath:
        cmd.append(f"--config-file={config.inipath}")
    if s.enabled:
        cmd.append("--syncguard")
    if s.races:
        cmd.append("--syncguard-races")
    if s.predict:
        cmd.append("--syncguard-predict")
    for i, a in enumerate(args):  # keep the caller's plugins, warning filters and -o
        if a in ("-p", "-W", "-o") and i + 1 < len(args):
            cmd += [a, args[i + 1]]
        elif a[:2] in ("-p", "-W", "-o") and len(a) > 2 and not a.startswith("--"):
            cmd.append(a)
    if config.pluginmanager.has_plugin("xdist"):
        cmd += ["-n", "0"]  # one test, no workers, even if addopts asks for them
    return cmd


def run_isolated(item: pytest.Item, settings: Settings, plugin_name: str,
                 on_crash: Callable[[int], dict]) -> None:
    """Run ``item`` in a child (see :func:`child_command`) and replay the child's reports here.

    ``on_crash(returncode)`` gives the session-report entry (as a dict, as it travels on a
    report) for a child that died before reporting its teardown.
    """
    config = item.config
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    with tempfile.TemporaryDirectory(prefix="syncguard-") as tmp:
        out = Path(tmp, "reports.json")
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
