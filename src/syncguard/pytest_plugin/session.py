"""The per-run session object, registered as the pytest plugin that does the work.

Like pytest-xdist's ``DSession`` and pytest-benchmark's ``BenchmarkSession``: plugin.py builds one
:class:`SyncguardSession` per pytest process (serial run, xdist controller, xdist worker, isolate
child) in ``pytest_configure`` and registers it, so its methods are the hook implementations and
its attributes are the run's state. Options live in options.py, isolation in isolate.py,
hypothesis examples in examples.py, sticky CUDA errors in poison.py, the file in sessionfile.py;
writing the file and the terminal summary out is :class:`SessionOutput`'s, called from the hooks.
"""
from __future__ import annotations

import contextlib
import json
import sys
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

import pytest

from syncguard.attribution import codescope
from syncguard.pytest_plugin import devices
from syncguard.pytest_plugin import isolate
from syncguard.pytest_plugin import options
from syncguard.pytest_plugin import warmup
from syncguard.attribution.aggregate import ScopeJudge, aggregate, judge_for, split
from syncguard.attribution.codescope import CodeScope
from syncguard.records.events import RegionReport, format_report
from syncguard.pytest_plugin.examples import final_report, wrap_examples
from syncguard.reporting.explain import (failure_table, nothing_predicted, prediction_line,
                                         summary_lines)
from syncguard.pytest_plugin.options import Plan, plan_for, resolve_settings
from syncguard.pytest_plugin.poison import PoisonGuard
from syncguard.regions.region import audit
from syncguard.reporting.sessionfile import AUDITED_STATES, SessionFile, TestEntry, summarize, write_atomic
from syncguard.reporting.weaker import mark, weaker_mark

MEASUREMENTS_PROPERTY = "syncguard_measurements"  # user_properties name copied into the report


class SyncguardWarning(UserWarning):
    """A sync in an audited test under ``--syncguard-mode=warn``."""


@dataclass
class ItemState:
    """What syncguard knows about one test while it runs (in ``item.stash``)."""

    plan: Plan
    report: RegionReport | None = None
    examples: int | None = None
    measurements: dict[str, Any] = field(default_factory=dict)
    outcome: str = "passed"
    duration: float = 0.0
    reason: str | None = None
    poisoned: str | None = None
    failed_by_us: bool = False
    own_regions: list[RegionReport] = field(default_factory=list)  # opened through the fixture
    codescope: CodeScope = codescope.EVERYWHERE  # whose syncs count (set at collection)
    lent: str | None = None  # the cuda detector's ``weaker`` as the call phase's region exited
    _judge: ScopeJudge | None = field(default=None, init=False, repr=False)

    @property
    def judge(self) -> ScopeJudge:
        """The code scope's decision for each of the test's events, made once and read by every
        view of them (judging, failure table, examples, the session report's records); a new
        one if the test set another scope (``syncguard.set_scope``)."""
        if self._judge is None or self._judge.scope is not self.codescope:
            self._judge = ScopeJudge(self.codescope)
        return self._judge

    def observe(self, rep: pytest.TestReport) -> None:
        """Fold one phase's report into the test's outcome (the worst phase wins)."""
        if rep.when == "call":
            self.duration = rep.duration
        if hasattr(rep, "wasxfail"):
            self.outcome = "xfailed" if rep.skipped else "xpassed"
        elif rep.failed:
            if self.outcome not in ("failed", "error"):
                self.outcome = "failed" if rep.when == "call" else "error"
        elif rep.skipped and self.outcome == "passed":
            self.outcome = "skipped"


def merged(reports: list[RegionReport]) -> RegionReport:
    """The regions a test opened through the ``syncguard`` fixture, as one report; its detectors
    are the first region's that ran without the cuda detector, if any (the weakest, which the
    test's ``weaker`` mark and the gate read), else the first region's."""
    weakest = min(reports, key=lambda r: not r.detectors or "cuda" in r.detectors)
    out = RegionReport(detectors=weakest.detectors, detector_reason=weakest.detector_reason,
                       cuda_available=all(r.cuda_available for r in reports),
                       reason=next((r.reason for r in reports if r.reason), None))
    for r in reports:
        out.syncs += r.syncs
        out.allowed += r.allowed
        out.races += r.races
        out.notes += [n for n in r.notes if n not in out.notes]
        out.not_predicted += r.not_predicted
    return out


STATE = pytest.StashKey[ItemState]()


def entry_for(item: pytest.Item, state: ItemState, worker: str | None,
              keep_events: bool = False) -> TestEntry:
    """The session report's record of one test, built where the test ran: one record per site
    (aggregate.py), split by the test's code scope."""
    rep, plan, reason = state.report, state.plan, state.reason
    syncs, out_syncs = aggregate(rep.syncs, state.judge) if rep else ([], [])
    allowed, out_allowed = aggregate(rep.allowed, state.judge) if rep else ([], [])
    if not plan.audited:
        audit_state, reason = "off", plan.reason
    elif rep is None:
        audit_state = "off"
        reason = reason or f"not audited ({state.outcome} before the call phase)"
    elif not rep.cuda_available:
        audit_state, reason = "not_audited", rep.reason
    else:
        audit_state = "syncs" if syncs or rep.races else "allowed" if allowed else "clean"
        reason = reason or ("; ".join(rep.notes) or None)
        if rep.not_predicted:  # what the predictor could not see is never reported clean
            unseen = (f"{len(rep.not_predicted)} call(s) not predicted, first: "
                      f"{rep.not_predicted[0]}")
            audit_state = audit_state if audit_state == "syncs" else "not_audited"
            reason = unseen if audit_state == "not_audited" else f"{reason}; {unseen}"
    measurements: dict[str, Any] = {}
    for name, value in item.user_properties:
        if name == MEASUREMENTS_PROPERTY and isinstance(value, dict):
            measurements.update(value)
    measurements.update(state.measurements)
    # plain JSON types only: the entry crosses xdist's execnet, which refuses str subclasses
    # such as torch's TorchVersion
    measurements = json.loads(json.dumps({str(k): v for k, v in measurements.items()},
                                         default=str))
    torch = sys.modules.get("torch")
    device = (f"cuda:{torch.cuda.current_device()}"
              if torch is not None and torch.cuda.is_initialized() else None)
    return TestEntry(
        nodeid=item.nodeid, outcome=state.outcome, audit=audit_state, reason=reason,
        syncs=tuple(syncs), allowed=tuple(allowed), outside=tuple(out_syncs + out_allowed),
        races=tuple(rep.races) if rep else (), duration_s=round(state.duration, 6),
        examples=state.examples, measurements=measurements, worker=worker, device=device,
        events=tuple(rep.syncs + rep.allowed) if rep and keep_events else (),
        detector_reason=_detector_reason(rep) if audit_state in AUDITED_STATES else None,
        detectors=tuple(rep.detectors) if rep and audit_state in AUDITED_STATES else None,
        weaker=(weaker_mark(plan.detectors, rep, state.lent)
                if rep and audit_state in AUDITED_STATES else None))


def carried(crosses: bool, entry: TestEntry) -> TestEntry | dict:
    """The entry as a test report carries it: a plain dict where the report leaves this process
    (``crosses``: an xdist worker's reports go to the controller over execnet, an
    ``--syncguard-isolate`` child's to its parent as JSON), the entry itself where this process
    reads it back (a serial run, the controller): serialized only to cross."""
    return entry.to_dict() if crosses else entry


def _lent() -> str | None:
    """The cuda detector's ``weaker`` now: why CUPTI is not its own (lent to a profiler that
    started while a region was open, or not taken back), else None; None where no region has
    loaded the detectors."""
    if "syncguard.detectors.cuda.detector" not in sys.modules:  # no region armed it: nothing lent
        return None
    from syncguard import detectors as registry

    return registry.get("cuda").weaker


def _detector_reason(rep: RegionReport) -> str | None:
    """What ran: the region's reason (``auto`` resolved, a fallback), or the detectors asked for."""
    return rep.detector_reason or (f"{','.join(rep.detectors)} (as asked)" if rep.detectors
                                   else None)


def in_scope(rep: RegionReport, scope: CodeScope | ScopeJudge) -> RegionReport:
    """The report with only the syncs inside the scope (what is judged), saying how many are not."""
    judge = judge_for(scope)
    inside, outside = split(rep.syncs, judge)
    if not outside:
        return rep
    note = (f"{len(outside)} more sync(s) outside the code scope ({judge.scope.described}), "
            "not counted")
    return replace(rep, syncs=[e for e, _ in inside], notes=list(rep.notes) + [note])


def state_for(item: pytest.Item, settings, scope_for) -> ItemState | None:
    """The test's plan and code scope; pytest.UsageError naming the test for a bad marker."""
    plan = plan_for(item, settings)
    if plan is None:
        return None
    try:
        return ItemState(plan, codescope=scope_for(plan.scope, plan.ignore, "scope"))
    except ValueError as e:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.syncguard: {e}") from None


#: a worker's collection report carries a bad marker's usage error under this attribute (an
#: extra attribute of a report travels to the xdist controller with it), for the controller to
#: raise: there the run stops with exit 4, as a serial run does
USAGE_ERROR_ATTR = "syncguard_usage_error"


def _fail_on_bad_markers(rep: pytest.CollectReport, settings, scope_for) -> None:
    for item in rep.result:
        if isinstance(item, pytest.Item):
            try:
                state_for(item, settings, scope_for)
            except pytest.UsageError as e:
                rep.outcome, rep.longrepr = "failed", f"usage error: {e}"
                setattr(rep, USAGE_ERROR_ATTR, str(e))
                return


class ScopeResolver:
    """Option or marker text -> CodeScope, against this run's rootdir and test-file patterns;
    each distinct text is resolved (file system, imports) once."""

    def __init__(self, config: pytest.Config):
        self.rootdir = config.rootpath
        self.patterns = tuple(config.getini("python_files") or ())
        self.done: dict[tuple, CodeScope] = {}

    def __call__(self, scope: tuple[str, ...], ignore: tuple[str, ...],
                 where: str = "--syncguard-scope", **sources: str | None) -> CodeScope:
        """``sources``: codescope.resolve's ``scope_from``/``ignore_from``."""
        key = (scope, ignore, where, tuple(sorted(sources.items())))  # sources: in the shown text
        if key not in self.done:
            self.done[key] = codescope.resolve(scope, ignore, self.rootdir, self.patterns, where,
                                               **sources)
        return self.done[key]


class SyncguardSession:
    """One per pytest process; its ``pytest_*`` methods are registered as hooks."""

    def __init__(self, config: pytest.Config, plugin_name: str):
        self.config = config
        self.plugin_name = plugin_name  # what an --syncguard-isolate child loads with -p
        self.settings = resolve_settings(config)
        self.is_worker = hasattr(config, "workerinput")
        self.worker_id = (config.workerinput.get("workerid") if self.is_worker  # type: ignore
                          else None) or devices.current_worker_id()
        self.entries: dict[str, TestEntry] = {}
        self.built: dict[str, TestEntry] = {}  # made here, until this process logs its report
        self.crosses = self.is_worker or bool(self.settings.child)  # reports leave the process
        self.warmed = False
        self.no_cuda_to_isolate: str | None = None  # --syncguard-isolate: why not, once known
        self.poison = PoisonGuard(config, self.is_worker, bool(self.settings.child))
        self.scope_for = ScopeResolver(config)
        try:
            self.codescope = self.scope_for(  # an error names the flag or ini key given
                self.settings.scope, self.settings.ignore,
                scope_from=options.where(config, "syncguard_scope"),
                ignore_from=options.where(config, "syncguard_ignore"))
        except ValueError as e:
            raise pytest.UsageError(f"syncguard: {e}") from None
        self.output = SessionOutput(config, self.settings, self.codescope, self.is_worker)
        self.collection_errors = 0  # failed collectors (a worker's too, on the xdist controller)
        self.prediction = None  # --syncguard-predict: the session's predicting() block
        if self.settings.predict and self.settings.enabled:
            from syncguard.pytest_plugin import early

            # opened before the first conftest (plugin.py), else now, before collection: tests
            # and skip conditions see torch.cuda.is_available(); last in __init__, so that
            # nothing after it can raise and leave it open
            early.open_block(config)  # a no-op where it opened before the first conftest
            self.prediction = early.adopt(config)

    # -- session ------------------------------------------------------------------------------
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.output.started(self.entries.values())

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Counts failed collectors; on the xdist controller, a worker's bad marker is raised
        as the usage error a serial run raises (pytest_collection_modifyitems): xdist runs the
        other modules' tests past a collection error and exits 1, where a serial run stops
        before any test with exit 4. Raised here, it leaves the controller's loop and pytest
        ends the session (its workers with it), prints the one line and exits 4."""
        if report.failed:
            self.collection_errors += 1
        usage_error = getattr(report, USAGE_ERROR_ATTR, None)
        if usage_error and not self.is_worker:
            raise pytest.UsageError(usage_error)

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            try:
                state = state_for(item, self.settings, self.scope_for)
            except pytest.UsageError:
                if self.is_worker:  # already a collection error (pytest_make_collect_report)
                    continue
                raise
            if state is not None:
                item.stash[STATE] = state

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector):
        """On an xdist worker a UsageError would be an INTERNALERROR: fail the collection instead,
        carrying the error for the controller to raise (pytest_collectreport)."""
        rep = yield
        if self.is_worker and rep.passed:
            _fail_on_bad_markers(rep, self.settings, self.scope_for)
        return rep

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.prediction is not None:
            block, self.prediction = self.prediction, None
            block.__exit__(None, None, None)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.output.finished(session, exitstatus, self.entries.values(), self.collection_errors)
        if self.gate_failed() and session.exitstatus in (pytest.ExitCode.OK,
                                                         pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def gate_failed(self) -> bool:
        return self.output.writes and require_cuda_failed(self.settings,
                                                          list(self.entries.values()))

    # -- one test -----------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem) -> bool | None:
        state = item.stash.get(STATE, None)
        if not isolate.wants_isolation(self.settings, state is not None and state.plan.audited,
                                       state.plan.detectors if state is not None else ()):
            return None
        if self.no_cuda_to_isolate is None:
            self.no_cuda_to_isolate = isolate.cuda_unavailable(self.settings.detectors)
        if self.no_cuda_to_isolate:  # nothing can poison a context that does not exist
            return None
        isolate.run_isolated(item, self.settings, self.plugin_name, lambda code: carried(
            self.crosses, entry_for(item, replace(state, outcome="failed", reason=(
                f"isolated subprocess exited with code {code}")), self.worker_id)))
        return True

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        state = item.stash.get(STATE, None)
        if state is None or not state.plan.audited:
            return
        if self.poison.poisoned_by is not None:
            state.reason = f"not run: CUDA context poisoned by {self.poison.poisoned_by[0]}"
            self.poison.refuse_if_poisoned()
        if not self.warmed:
            if not self.settings.predict:  # predicted: no CUDA context to warm up
                warmup.cuda_warmup(self.worker_id, self.settings.detectors)
            self.config.hook.pytest_syncguard_warmup(config=self.config)
            warmup.synchronize_if_initialised()
            self.warmed = True

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_call(self, item: pytest.Item):
        """Audit the call phase and judge it."""
        state = item.stash.get(STATE, None)
        if state is None or not state.plan.audited:
            return (yield)
        plan, exc, result, examples = state.plan, None, None, None
        with contextlib.ExitStack() as stack:
            for spec in plan.allows:
                stack.enter_context(spec.scope())
            report = stack.enter_context(audit(plan.detectors, races=plan.races,
                                               fail_on_phases=plan.fail_on_phase))
            examples = wrap_examples(item, plan, stack, state.judge, report.cuda_available)
            try:
                result = yield
            except (KeyboardInterrupt, SystemExit):
                state.reason = "interrupted"
                raise
            except BaseException as e:  # test failures and pytest outcomes: judge, then re-raise
                exc = e
        state.report = rep = final_report(report, exc, examples)
        state.lent = _lent()
        # A test that opened forbid()/audit() through the fixture said which part it cares about:
        # those regions are its report, and they judged it themselves (forbid() raised).
        judge = not state.own_regions
        if state.own_regions:
            state.report = rep = merged(state.own_regions)
        state.examples = None if examples is None else len(examples)
        state.poisoned = self.poison.check(item.nodeid)
        if state.poisoned:
            state.reason = f"left the CUDA context poisoned: {state.poisoned}"
        if exc is not None:
            raise exc
        if state.poisoned:
            state.failed_by_us = True
            pytest.fail(self.poison.text(state.poisoned), pytrace=False)
        if judge and rep.cuda_available:
            _judge_call(item, state, rep)
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call):
        rep = yield
        state = item.stash.get(STATE, None)
        if state is None:
            return rep
        state.observe(rep)
        if rep.when == "call" and rep.failed and not state.failed_by_us:
            judged = state.report and in_scope(state.report, state.judge)
            if judged and not judged.clean:
                rep.sections.append(("syncguard", failure_table(judged, scope=state.judge)))
            if state.poisoned:
                rep.sections.append(("syncguard", self.poison.text(state.poisoned)))
        if rep.when == "teardown":
            entry = self.built[item.nodeid] = entry_for(item, state, self.worker_id,
                                                        self.settings.keep_events)
            rep.syncguard_entry = carried(self.crosses, entry)
            if state.poisoned and self.is_worker:  # the controller will see this worker go
                rep.syncguard_poisoned = state.poisoned
        return rep

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.output.reported(report)
        data = getattr(report, "syncguard_entry", None)
        if data is not None:
            # the entry built here, else one another process sent (read back once, here)
            entry = self.entries[report.nodeid] = self.built.pop(report.nodeid, None) or (
                TestEntry.from_dict(data) if isinstance(data, dict) else data)
            if getattr(report, "syncguard_poisoned", None) and entry.worker:
                self.poison.worker_ended(entry.worker, report.nodeid, report.syncguard_poisoned)
        elif (report.when not in ("setup", "call", "teardown") and report.failed
              and self.settings.enabled):
            # xdist reports a test whose worker died with when="???"; keep what is known.
            gateway = getattr(getattr(report, "node", None), "gateway", None)
            self.entries.setdefault(report.nodeid, TestEntry(
                report.nodeid, "failed", "off", worker=getattr(gateway, "id", None),
                reason=f"no syncguard result: {str(report.longrepr).splitlines()[0]}"))
        if data is not None:
            self.output.progressed(self.entries.values())

    # -- terminal -----------------------------------------------------------------------------
    def pytest_terminal_summary(self, terminalreporter) -> None:
        self.output.summary(terminalreporter, list(self.entries.values()), self.gate_failed(),
                            self.no_cuda_to_isolate)


class SessionOutput:
    """What one pytest process writes out: the session report file and the terminal summary (a
    serial run or the xdist controller), or the test reports an ``--syncguard-isolate`` child
    hands back to its parent.

    Apart from :class:`SyncguardSession` so that the session keeps the run's state and its
    judging, and this keeps how that state is written down, the way pytest-xdist's ``DSession``
    leaves its terminal lines to a ``TerminalDistReporter``. The session's hooks call it; it is
    not registered as a plugin itself.
    """

    def __init__(self, config: pytest.Config, settings, scope: CodeScope, is_worker: bool):
        self.config, self.settings = config, settings
        self.scope = scope.described  # the summary names where the scope was given
        # the report file and the summary; --collect-only runs nothing, so it writes neither
        self.writes = (not is_worker and not settings.child
                       and not getattr(config.option, "collectonly", False))
        self.child_reports: list[dict] = []
        self.file: SessionFile | None = None
        if settings.report and self.writes:
            path = Path(config.invocation_params.dir, settings.report)
            try:
                self.file = SessionFile(path, {**settings.options(), **_scope_options(scope)},
                                        max_stacks=settings.max_stacks)
            except OSError as e:
                raise pytest.UsageError(
                    f"syncguard: {options.where(config, 'syncguard_report')}: "
                    f"{settings.report!r}: cannot write there ({e.strerror or e})") from None

    def started(self, entries: Iterable[TestEntry]) -> None:
        """An (empty, incomplete) report from the start: a run killed at once still leaves one."""
        if self.file is not None:
            self.file.write(entries, complete=False)

    def reported(self, report: pytest.TestReport) -> None:
        """An isolate child keeps every phase's report for its parent."""
        if self.settings.child:
            self.child_reports.append(self.config.hook.pytest_report_to_serializable(
                config=self.config, report=report))

    def progressed(self, entries: Iterable[TestEntry]) -> None:
        """After each test: an interrupted run keeps what it has (at most one write a second)."""
        if self.file is not None:
            self.file.write_now_and_then(entries)

    def finished(self, session: pytest.Session, exitstatus: int,
                 entries: Iterable[TestEntry], collection_errors: int = 0) -> None:
        """The child's reports, or the report: marked complete unless the run stopped early or a
        test module failed to collect (its tests are missing); put back as it was before the run
        on a usage error (bad input changes nothing)."""
        if self.settings.child:
            write_atomic(self.settings.child, json.dumps(self.child_reports))
        if self.file is None:
            return
        if int(exitstatus) == pytest.ExitCode.USAGE_ERROR:
            self.file.undo()
            return
        complete = (int(exitstatus) in (0, 1, 5) and not session.shouldfail
                    and not session.shouldstop and not collection_errors)
        self.file.write(entries, complete=complete, final=True)

    def summary(self, terminalreporter, tests: list[TestEntry], gate_failed: bool,
                no_cuda_to_isolate: str | None) -> None:
        """The ``syncguard`` section of pytest's terminal summary, where this process writes one."""
        if not self.writes or not (tests or gate_failed):
            return
        try:
            terminalreporter.write_sep("=", "syncguard", red=gate_failed)
            if gate_failed:
                what = ("nothing was predicted" if self.settings.predict
                        and any(t.audited for t in tests) else
                        f"no test could be audited ({_why_none(tests)})")
                terminalreporter.write_line(
                    f"syncguard: FAILED: --syncguard-require-cuda: {what}; the session fails",
                    red=True, bold=True)
            if no_cuda_to_isolate and self.settings.isolate:
                terminalreporter.write_line(f"--syncguard-isolate: no subprocesses, "
                                            f"{no_cuda_to_isolate}")
            for line in summary_lines(tests, summarize(tests), scope=self.scope,
                                      predicted=self.settings.predict,
                                      prediction=self._prediction(tests)):
                terminalreporter.write_line(line)
            if self.file is not None:
                terminalreporter.write_line(f"report: {self.file.path}")
        except Exception as e:  # a summary must never turn a run into an internal error
            terminalreporter.write_line(f"syncguard: could not print the summary: {e!r}")

    def _prediction(self, tests: list[TestEntry]) -> str | None:
        """What the summary says about prediction: for which torch and from which rules the
        run was predicted, or why it was not (early.Decision.why)."""
        if not self.settings.predict:
            return self.settings.predict_why
        from syncguard.pytest_plugin import early

        target = early.target(self.config)
        return prediction_line(tests, target, self.settings.predict_why,
                               early.nearest_rules(target))


def require_cuda_failed(settings, tests: list[TestEntry]) -> bool:
    """``--syncguard-require-cuda`` and not one test could be audited, or, under
    ``--syncguard-predict``, nothing was predicted (explain.nothing_predicted): either way the
    run judged no CUDA code (a run that only collects audits nothing and is not judged)."""
    if not settings.require_cuda:
        return False
    return not any(t.audited for t in tests) or bool(settings.predict and nothing_predicted(tests))


def _judge_call(item: pytest.Item, state, rep) -> None:
    """Fail or warn for the call phase's in-scope syncs, as the test's mode says."""
    judged = in_scope(rep, state.judge)
    if judged.clean:
        return
    if state.plan.mode == "fail":
        state.failed_by_us = True
        weaker = mark(weaker_mark(state.plan.detectors, rep, state.lent))
        pytest.fail(failure_table(judged, title=f"syncguard: {item.nodeid}: {judged.summary()}"
                                  + (f" {weaker}" if weaker else ""), scope=state.judge),
                    pytrace=False)
    if state.plan.mode == "warn":
        first = judged.syncs[0] if judged.syncs else judged.races[0]
        warnings.warn_explicit(SyncguardWarning(format_report(judged)), SyncguardWarning,
                               first.filename or "<unknown>", first.lineno or 0)


def _scope_options(scope: CodeScope) -> dict[str, str]:
    """The report's record of the code scope: ``scope``, which the gate compares, names no
    source, so that one scope given on the command line or in the ini file does not read as a
    change of what the run could see; ``scope_from`` and ``ignore_from`` say where the scope
    and the names it ignores were given, for people."""
    return {"scope": scope.text, **({"scope_from": scope.source} if scope.source else {}),
            **({"ignore_from": scope.ignore_source} if scope.ignore_source else {})}


def _why_none(tests: list[TestEntry]) -> str:
    reasons = sorted({t.reason for t in tests if t.audit == "not_audited" and t.reason})
    return "; ".join(reasons) or ("no test was collected for auditing" if not tests
                                  else "every test was off or not run")
