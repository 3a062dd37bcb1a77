"""The per-run controller behind the pytest plugin.

plugin.py only wires hooks to a ``Controller``; everything stateful lives here: settings, the
per-test audit, hypothesis examples, the JSON document (merged on the xdist controller), warm-up,
worker devices, sticky CUDA errors and ``--syncguard-isolate``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

from . import devices, report as report_doc
from .events import DETECTORS as DEFAULT_DETECTORS, Report, SyncError, SyncEvent, format_report
from .render import group_by_site, render_report, summary_lines

MODES = ("fail", "warn", "record")
MEASUREMENTS_PROPERTY = "syncguard_measurements"  # user_properties name copied into the report
_POISON_MARKS = ("device-side assert", "CUDA error", "illegal memory access",
                 "unspecified launch failure", "misaligned address")


class SyncguardWarning(UserWarning):
    """A sync in an audited test under ``--syncguard-mode=warn``."""


# ---------------------------------------------------------------------------------------------
# Settings: command line, then ini, then default; a bad value names where it came from.

@dataclass(frozen=True)
class Settings:
    enabled: bool = False
    mode: str = "fail"
    detectors: tuple[str, ...] = DEFAULT_DETECTORS
    races: bool = False
    report: str | None = None
    isolate: bool = False
    warmup: str | None = None
    child: str | None = None  # internal: this process is an --syncguard-isolate child

    def options(self) -> dict[str, Any]:
        return {"mode": self.mode, "detectors": list(self.detectors), "races": self.races,
                "isolate": self.isolate}


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ValueError(f"{where}: {value!r} is not a boolean (true/false)")


def _mode(value: Any, where: str) -> str:
    if value not in MODES:
        raise ValueError(f"{where}: {value!r} is not one of {', '.join(MODES)}")
    return value


def _detectors(value: Any, where: str) -> tuple[str, ...]:
    from .scope import parse_detectors

    return parse_detectors(value, where)


def _warmup(value: Any, where: str) -> str:
    module, sep, attr = str(value).partition(":")
    if not sep or not module.strip() or not attr.strip():
        raise ValueError(f"{where}: {value!r} is not of the form 'module:callable'")
    return str(value).strip()


def resolve_settings(config: pytest.Config) -> Settings:
    """One place that turns options into Settings; raises pytest.UsageError for bad values."""
    def pick(dest: str, ini: str | None, check: Callable[[Any, str], Any], default: Any) -> Any:
        cli = config.getoption(dest, None)
        if cli is not None:
            return check(cli, f"command line option --{dest.replace('_', '-')}")
        raw = config.getini(ini) if ini else ""
        if isinstance(raw, str) and raw.strip():
            return check(raw.strip(), f"ini option {ini} ({config.inipath or 'ini'})")
        return default

    try:
        return Settings(
            enabled=pick("syncguard", "syncguard", _bool, False),
            mode=pick("syncguard_mode", "syncguard_mode", _mode, "fail"),
            detectors=pick("syncguard_detectors", "syncguard_detectors", _detectors,
                           DEFAULT_DETECTORS),
            races=pick("syncguard_races", "syncguard_races", _bool, False),
            report=pick("syncguard_report", "syncguard_report", lambda v, w: str(v), None),
            isolate=pick("syncguard_isolate", "syncguard_isolate", _bool, False),
            warmup=pick("syncguard_warmup", "syncguard_warmup", _warmup, None),
            child=config.getoption("syncguard_child", None),
        )
    except ValueError as e:
        raise pytest.UsageError(f"syncguard: {e}") from None


# ---------------------------------------------------------------------------------------------
# Markers -> a per-test plan. Marker arguments are parsed by calling real functions.

@dataclass(frozen=True)
class AllowSpec:
    reason: str
    max: int | None = None
    api: str | None = None
    kind: str | None = None

    def scope(self):
        from .scope import allow

        return allow(self.reason, max=self.max, api=self.api, kind=self.kind)


def syncguard_marker(*, mode: str | None = None, detectors: Any = None,
                     races: bool | None = None) -> dict[str, Any]:
    """``@pytest.mark.syncguard(mode=, detectors=, races=)``: opt in and override options."""
    out: dict[str, Any] = {}
    if mode is not None:
        out["mode"] = _mode(mode, "mode")
    if detectors is not None:
        out["detectors"] = _detectors(detectors, "detectors")
    if races is not None:
        out["races"] = _bool(races, "races")
    return out


def allow_sync_marker(reason: str | None = None, *, max: int | None = None,
                      api: str | None = None, kind: str | None = None) -> AllowSpec:
    """``@pytest.mark.allow_sync(reason=..., max=None, api=None, kind=None)``."""
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError("needs reason='why this sync is acceptable'")
    spec = AllowSpec(reason, max, api, kind)
    spec.scope()  # validates max/kind with allow()'s own messages
    return spec


@dataclass(frozen=True)
class Plan:
    audited: bool
    mode: str
    detectors: tuple[str, ...]
    races: bool
    allows: tuple[AllowSpec, ...] = ()
    reason: str | None = None  # why not audited


def plan_for(item: pytest.Item, settings: Settings) -> Plan | None:
    """What to do with one test; None when syncguard has nothing to say about it."""
    def parse(mark, fn):
        try:
            return fn(*mark.args, **mark.kwargs)
        except (TypeError, ValueError) as e:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{mark.name}: {e}") from None

    opts = {"mode": settings.mode, "detectors": settings.detectors, "races": settings.races}
    marks = list(item.iter_markers("syncguard"))
    for m in reversed(marks):  # closest marker wins
        opts.update(parse(m, syncguard_marker))
    allows = tuple(parse(m, allow_sync_marker) for m in item.iter_markers("allow_sync"))
    if item.get_closest_marker("no_syncguard") is not None:
        return Plan(False, reason="no_syncguard marker", **opts) if settings.enabled else None
    if not (settings.enabled or marks):
        return None
    return Plan(True, allows=allows, **opts)


# ---------------------------------------------------------------------------------------------
# Per-test state and the fixture.

@dataclass
class ItemState:
    plan: Plan
    report: Report | None = None
    examples: int | None = None
    measurements: dict[str, Any] = field(default_factory=dict)
    outcome: str = "passed"
    duration: float = 0.0
    reason: str | None = None
    poisoned: str | None = None
    failed_by_us: bool = False


STATE = pytest.StashKey[ItemState]()


class SyncguardFixture:
    """The ``syncguard`` fixture: guard part of a test body, record measurements."""

    def __init__(self, item: pytest.Item, settings: Settings):
        self._item = item
        state = item.stash.get(STATE, None)
        plan = state.plan if state else None
        self.detectors = plan.detectors if plan else settings.detectors
        self.races = plan.races if plan else settings.races
        self.mode = plan.mode if plan else settings.mode
        self._measurements = state.measurements if state else {}

    def forbid(self, detectors=None, *, races=None):
        from .scope import forbid

        return forbid(detectors or self.detectors, races=self.races if races is None else races)

    def audit(self, detectors=None, *, races=None):
        from .scope import audit

        return audit(detectors or self.detectors, races=self.races if races is None else races)

    def allow(self, reason: str, **kw):
        from .scope import allow

        return allow(reason, **kw)

    def record(self, name: str, value: Any) -> None:
        """Store a JSON value under the test's ``measurements`` in the report."""
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise TypeError(f"syncguard.record({name!r}, ...): {type(value).__name__} is not JSON "
                            "serialisable") from None
        self._measurements[str(name)] = value

    @property
    def measurements(self) -> dict[str, Any]:
        return dict(self._measurements)


# ---------------------------------------------------------------------------------------------

def _sticky_error() -> str | None:
    """A sticky CUDA error in this process's context, or None. Never initialises CUDA."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    try:
        torch.cuda.synchronize()
    except Exception as e:  # RuntimeError, torch.AcceleratorError
        msg = str(e).strip()
        if any(p in msg for p in _POISON_MARKS):
            return msg.splitlines()[0] if msg else type(e).__name__
    return None


def _dedupe(events: list[SyncEvent]) -> list[SyncEvent]:
    return [e for e, _ in group_by_site(events)]


def _sync_errors(exc: BaseException | None) -> list[SyncError]:
    if isinstance(exc, SyncError):
        return [exc]
    return [e for sub in getattr(exc, "exceptions", ()) or () for e in _sync_errors(sub)]


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


class Controller:
    """One per pytest process (serial run, xdist controller, or xdist worker)."""

    def __init__(self, config: pytest.Config, plugin_name: str):
        self.config = config
        self.plugin_name = plugin_name
        self.settings = resolve_settings(config)
        self.is_worker = hasattr(config, "workerinput")
        self.worker_id = (config.workerinput.get("workerid") if self.is_worker  # type: ignore
                          else None) or devices.current_worker_id()
        self.entries: dict[str, dict[str, Any]] = {}
        self.doc: dict[str, Any] | None = None
        self.report_path: Path | None = None
        self.last_write = 0.0
        self.warmed = False
        self.poisoned_by: tuple[str, str] | None = None
        self.ended_workers: dict[str, tuple[str, str]] = {}  # xdist controller: worker -> culprit
        self.child_reports: list[dict] = []
        self.warmup_fn = self._load_warmup() if self.settings.warmup else None
        if self.settings.report and not self.is_worker and not self.settings.child:
            self.report_path = Path(config.invocation_params.dir, self.settings.report)

    def _load_warmup(self) -> Callable[[], Any]:
        module, _, attr = self.settings.warmup.partition(":")  # type: ignore[union-attr]
        try:
            fn = functools.reduce(getattr, attr.strip().split("."),
                                  importlib.import_module(module.strip()))
        except Exception as e:
            raise pytest.UsageError(f"syncguard: ini option syncguard_warmup: cannot load "
                                    f"{self.settings.warmup!r} ({type(e).__name__}: {e})") from None
        if not callable(fn):
            raise pytest.UsageError(f"syncguard: ini option syncguard_warmup: "
                                    f"{self.settings.warmup!r} is not callable")
        return fn

    # -- session ------------------------------------------------------------------------------
    def session_start(self) -> None:
        if self.report_path is not None:
            self.doc = report_doc.new_document(self.settings.options())
            self._write(complete=False)

    def collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            try:
                plan = plan_for(item, self.settings)
            except pytest.UsageError:
                if self.is_worker:  # already a collection error (check_collected); skip it
                    continue
                raise
            if plan is not None:
                item.stash[STATE] = ItemState(plan)

    def check_collected(self, rep: pytest.CollectReport) -> None:
        """On an xdist worker a UsageError would be an INTERNALERROR: fail the collection instead."""
        if not self.is_worker or not rep.passed:
            return
        for item in rep.result:
            if isinstance(item, pytest.Item):
                try:
                    plan_for(item, self.settings)
                except pytest.UsageError as e:
                    rep.outcome, rep.longrepr = "failed", f"usage error: {e}"
                    return

    def session_finish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.settings.child:
            report_doc.write_atomic(self.settings.child, json.dumps(self.child_reports))
        if self.doc is None:
            return
        complete = int(exitstatus) in (0, 1, 5) and not session.shouldfail and not session.shouldstop
        self._write(complete=complete)

    def _write(self, complete: bool) -> None:
        assert self.doc is not None and self.report_path is not None
        self.doc["complete"] = complete
        self.doc["tests"] = list(self.entries.values())
        report_doc.write_document(self.report_path, self.doc)
        self.last_write = time.monotonic()

    # -- one test -----------------------------------------------------------------------------
    def runtest_setup(self, item: pytest.Item) -> None:
        state = item.stash.get(STATE, None)
        if state is None or not state.plan.audited:
            return
        if self.poisoned_by is not None:
            culprit, msg = self.poisoned_by
            state.reason = f"not run: CUDA context poisoned by {culprit}"
            pytest.fail(f"syncguard: not run: the CUDA context of this process was poisoned by "
                        f"{culprit} ({msg}); run with --syncguard-isolate or pytest-xdist to keep "
                        "later GPU tests meaningful", pytrace=False)
        if not self.warmed:
            self.warm_up()

    def warm_up(self) -> None:
        """Pay lazy CUDA initialisation (context, allocator, cuBLAS, pinned pool) before auditing."""
        torch = None
        if set(self.settings.detectors) != {"fake"}:  # the fake detector needs no CUDA warm-up
            try:
                import torch
            except ImportError:
                pass
        if torch is not None and torch.cuda.is_available():
            devices.assign(self.worker_id)
            a = torch.randn(64, 64, device="cuda")
            (a @ a).sum().item()
            (a.half() @ a.half()).float().sum().item()
            (a > 0).nonzero()
            torch.empty(64, pin_memory=True).to("cuda", non_blocking=True)
            torch.cuda.synchronize()
        if self.warmup_fn is not None:
            self.warmup_fn()
            if torch is not None and torch.cuda.is_initialized():
                torch.cuda.synchronize()
        self.warmed = True

    def runtest_call(self, item: pytest.Item):
        """Generator for a ``wrapper=True`` hook: audit the call phase and judge it."""
        state = item.stash.get(STATE, None)
        if state is None or not state.plan.audited:
            return (yield)
        from .scope import audit

        plan, exc, result, examples = state.plan, None, None, None
        with contextlib.ExitStack() as stack:
            for spec in plan.allows:
                stack.enter_context(spec.scope())
            region = audit(plan.detectors, races=plan.races)
            report = stack.enter_context(region)
            examples = self._wrap_hypothesis(item, plan, stack)
            try:
                result = yield
            except (KeyboardInterrupt, SystemExit):
                state.reason = "interrupted"
                raise
            except BaseException as e:  # test failures and pytest outcomes: judge, then re-raise
                exc = e
        state.report = self._final_report(report, exc, examples)
        state.examples = None if examples is None else len(examples)
        state.poisoned = _sticky_error()
        if state.poisoned:
            self.poisoned_by = (item.nodeid, state.poisoned)
            state.reason = f"left the CUDA context poisoned: {state.poisoned}"
        if exc is not None:
            raise exc
        if state.poisoned:
            state.failed_by_us = True
            pytest.fail(self._poison_text(state), pytrace=False)
        rep = state.report
        if rep.cuda_available and not rep.clean:
            if plan.mode == "fail":
                state.failed_by_us = True
                pytest.fail(render_report(rep, title=f"syncguard: {item.nodeid}: {rep.summary()}"),
                            pytrace=False)
            if plan.mode == "warn":
                first = rep.syncs[0] if rep.syncs else rep.races[0]
                warnings.warn_explicit(SyncguardWarning(format_report(rep)), SyncguardWarning,
                                       first.filename or "<unknown>", first.lineno or 0)
        return result

    def _poison_text(self, state: ItemState) -> str:
        then = ("it ran in its own subprocess (--syncguard-isolate), so no other test is affected"
                if self.settings.child else
                "this worker ends before its next test and a fresh one takes over" if self.is_worker
                else "later GPU tests in this process are reported as errors naming this test; use "
                     "--syncguard-isolate or pytest-xdist to keep them meaningful")
        return f"syncguard: this test left the CUDA context poisoned ({state.poisoned}); {then}"

    def _wrap_hypothesis(self, item, plan: Plan, stack: contextlib.ExitStack) -> list | None:
        """Audit every hypothesis example; in fail mode a sync fails the example so it shrinks."""
        obj = getattr(item, "obj", None)
        handle = getattr(obj, "hypothesis", None)
        if not getattr(obj, "is_hypothesis_test", False) or handle is None:
            return None
        from .scope import audit, forbid

        original, reports = handle.inner_test, []
        region = forbid if plan.mode == "fail" else audit

        @functools.wraps(original)
        def inner(*args, **kwargs):
            with region(plan.detectors, races=plan.races) as rep:
                reports.append(rep)
                return original(*args, **kwargs)

        handle.inner_test = inner
        stack.callback(setattr, handle, "inner_test", original)
        # Auditing adds per-example overhead (profiler start/stop): suspend the deadline meanwhile.
        target = getattr(obj, "__func__", obj)
        current = getattr(target, "_hypothesis_internal_use_settings", None)
        if current is not None and current.deadline is not None:
            from hypothesis import settings

            target._hypothesis_internal_use_settings = settings(current, deadline=None)
            stack.callback(setattr, target, "_hypothesis_internal_use_settings", current)
        return reports

    @staticmethod
    def _final_report(outer: Report, exc: BaseException | None, examples: list | None) -> Report:
        """For hypothesis tests list each call site once, from the failing example if any."""
        if examples is None:
            return outer
        failing = [e.report for e in _sync_errors(exc)]
        syncs = [s for r in failing for s in r.syncs] if failing else outer.syncs
        return dataclasses.replace(outer, syncs=_dedupe(syncs), allowed=_dedupe(outer.allowed))

    def makereport(self, item: pytest.Item, rep: pytest.TestReport) -> None:
        state = item.stash.get(STATE, None)
        if state is None:
            return
        if rep.when == "call":
            state.duration = rep.duration
        if hasattr(rep, "wasxfail"):
            state.outcome = "xfailed" if rep.skipped else "xpassed"
        elif rep.failed:
            if state.outcome not in ("failed", "error"):
                state.outcome = "failed" if rep.when == "call" else "error"
        elif rep.skipped and state.outcome == "passed":
            state.outcome = "skipped"
        if rep.when == "call" and rep.failed and not state.failed_by_us:
            if state.report is not None and not state.report.clean:
                rep.sections.append(("syncguard", render_report(state.report)))
            if state.poisoned:
                rep.sections.append(("syncguard", self._poison_text(state)))
        if rep.when == "teardown":
            rep.syncguard_entry = self.entry(item, state)  # travels to the xdist controller
            if state.poisoned and self.is_worker:  # the controller will see this worker go
                rep.syncguard_poisoned = state.poisoned

    def entry(self, item: pytest.Item, state: ItemState) -> dict[str, Any]:
        rep, plan = state.report, state.plan
        reason = state.reason
        if not plan.audited:
            audit, reason = "off", plan.reason
        elif rep is None:
            audit, reason = "off", reason or f"not audited ({state.outcome} before the call phase)"
        elif not rep.cuda_available:
            audit, reason = "not_audited", rep.reason
        else:
            audit = "syncs" if not rep.clean else "allowed" if rep.allowed else "clean"
            reason = reason or ("; ".join(rep.notes) or None)
        measurements = {}
        for name, value in item.user_properties:
            if name == MEASUREMENTS_PROPERTY and isinstance(value, dict):
                measurements.update(value)
        measurements.update(state.measurements)
        # plain JSON types only: the entry crosses xdist's execnet, which refuses str subclasses
        # such as torch's TorchVersion (seen on the H200 under -n 2)
        measurements = json.loads(json.dumps(measurements, default=str))
        torch = sys.modules.get("torch")
        device = (f"cuda:{torch.cuda.current_device()}"
                  if torch is not None and torch.cuda.is_initialized() else None)
        return {
            "nodeid": item.nodeid, "outcome": state.outcome, "audit": audit, "reason": reason,
            "syncs": [e.to_dict() for e in rep.syncs] if rep else [],
            "allowed": [e.to_dict() for e in rep.allowed] if rep else [],
            "races": [r.to_dict() for r in rep.races] if rep else [],
            "duration_s": round(state.duration, 6), "examples": state.examples,
            "measurements": {str(k): _jsonable(v) for k, v in measurements.items()},
            "worker": self.worker_id, "device": device,
        }

    def logreport(self, rep: pytest.TestReport) -> None:
        if self.settings.child:
            self.child_reports.append(self.config.hook.pytest_report_to_serializable(
                config=self.config, report=rep))
        entry = getattr(rep, "syncguard_entry", None)
        if entry is not None:
            self.entries[rep.nodeid] = entry
            if getattr(rep, "syncguard_poisoned", None) and entry.get("worker"):
                self.ended_workers[entry["worker"]] = (rep.nodeid, rep.syncguard_poisoned)
        elif rep.when not in ("setup", "call", "teardown") and rep.failed and self.settings.enabled:
            # xdist reports a test whose worker died with when="???"; keep what is known.
            gateway = getattr(getattr(rep, "node", None), "gateway", None)
            self.entries.setdefault(rep.nodeid, {
                "nodeid": rep.nodeid, "outcome": "failed", "audit": "off",
                "reason": f"no syncguard result: {str(rep.longrepr).splitlines()[0]}",
                "syncs": [], "allowed": [], "races": [], "duration_s": 0.0, "examples": None,
                "measurements": {}, "worker": getattr(gateway, "id", None), "device": None})
        if self.doc is not None and entry is not None and time.monotonic() - self.last_write > 1.0:
            self._write(complete=False)  # an interrupted run keeps what it has, as valid JSON

    def before_protocol(self) -> None:
        """A poisoned xdist worker exits before its next test, once the culprit is reported.

        Exiting only now (not right after the culprit) keeps the culprit's results whole: xdist
        has marked it complete, and the controller reschedules the untouched next test.
        """
        if self.is_worker and self.poisoned_by is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(3)

    def handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched) -> None:
        node = getattr(report, "node", None)
        worker = getattr(getattr(node, "gateway", None), "id", None)
        if worker not in self.ended_workers:
            return
        culprit, why = self.ended_workers.pop(worker)
        with contextlib.suppress(NotImplementedError):  # loadscope re-queues unfinished work itself
            sched.mark_test_pending(crashitem)
        report.outcome = "rescheduled"  # neither failed nor passed: not counted, shown in a line
        report.syncguard_rescheduled = (
            f"syncguard: ended worker {worker} after {culprit} poisoned its CUDA context ({why}); "
            f"{crashitem} was not started there and runs on a fresh worker")
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line(report.syncguard_rescheduled)

    # -- --syncguard-isolate ------------------------------------------------------------------
    def wants_isolation(self, item: pytest.Item) -> bool:
        state = item.stash.get(STATE, None)
        return (self.settings.isolate and not self.settings.child and state is not None
                and state.plan.audited)

    def run_isolated(self, item: pytest.Item) -> None:
        """Run one test in a fresh interpreter and replay its reports here."""
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        with tempfile.TemporaryDirectory(prefix="syncguard-") as tmp:
            out = Path(tmp, "reports.json")
            proc = subprocess.run(self._child_command(item, out), cwd=self.config.rootpath,
                                  capture_output=True, text=True,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})
            try:
                data = json.loads(out.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                data = []
        reports = [self.config.hook.pytest_report_from_serializable(config=self.config, data=d)
                   for d in data]
        reports = [r for r in reports if r is not None and r.nodeid == item.nodeid]
        if not any(r.when == "teardown" for r in reports):
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
            rep = pytest.TestReport(
                item.nodeid, item.location, {}, "failed",
                f"syncguard --syncguard-isolate: the subprocess for this test exited with code "
                f"{proc.returncode} before reporting\n{tail}", "call", [], 0.0)
            rep.syncguard_entry = self.entry(item, dataclasses.replace(
                item.stash[STATE], outcome="failed",
                reason=f"isolated subprocess exited with code {proc.returncode}"))
            reports.append(rep)
        for rep in reports:
            item.ihook.pytest_runtest_logreport(report=rep)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)

    def _child_command(self, item: pytest.Item, out: Path) -> list[str]:
        s, args = self.settings, self.config.invocation_params.args
        cmd = [sys.executable, "-m", "pytest", item.nodeid, "-q", "-p", self.plugin_name,
               f"--rootdir={self.config.rootpath}", "-p", "no:cacheprovider",
               f"--syncguard-child={out}", f"--syncguard-mode={s.mode}",
               f"--syncguard-detectors={','.join(s.detectors)}"]
        if self.config.inipath:
            cmd.append(f"--config-file={self.config.inipath}")
        if s.enabled:
            cmd.append("--syncguard")
        if s.races:
            cmd.append("--syncguard-races")
        for i, a in enumerate(args):  # keep the caller's plugins, warning filters and -o
            if a in ("-p", "-W", "-o") and i + 1 < len(args):
                cmd += [a, args[i + 1]]
            elif a[:2] in ("-p", "-W", "-o") and len(a) > 2 and not a.startswith("--"):
                cmd.append(a)
        if self.config.pluginmanager.has_plugin("xdist"):
            cmd += ["-n", "0"]  # one test, no workers, even if addopts asks for them
        return cmd

    # -- terminal -----------------------------------------------------------------------------
    def terminal_summary(self, terminalreporter) -> None:
        if self.is_worker or self.settings.child or not self.entries:
            return
        try:
            tests = list(self.entries.values())
            terminalreporter.write_sep("=", "syncguard")
            for line in summary_lines(tests, report_doc.summarize(tests)):
                terminalreporter.write_line(line)
            if self.report_path is not None:
                terminalreporter.write_line(f"report: {self.report_path}")
        except Exception as e:  # a summary must never turn a run into an internal error
            terminalreporter.write_line(f"syncguard: could not print the summary: {e!r}")
