"""Hypothesis tests: audit every example, so that a sync fails the example and hypothesis shrinks.

Why per example: auditing the whole test would report the union of all examples' syncs and give
hypothesis nothing to shrink on. In fail mode a syncing example raises ``SyncError`` as
``forbid()`` would, an ordinary failure that hypothesis minimises (syncs of phases that do not
fail, judged by the region as phases.py says, and syncs outside the code scope, see attribution/codescope.py, do not raise).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools

import pytest

from syncguard.attribution.aggregate import ScopeJudge, split
from syncguard.attribution.codescope import EVERYWHERE, CodeScope
from syncguard.records.events import RegionReport, SyncError, SyncEvent
from syncguard.reporting.explain import group_by_site
from syncguard.pytest_plugin.options import Plan
from syncguard.regions.region import audit


def wrap_examples(item: pytest.Item, plan: Plan, stack: contextlib.ExitStack,
                  codescope: CodeScope | ScopeJudge = EVERYWHERE, audits: bool = True
                  ) -> list[RegionReport] | None:
    """Audit each example of a hypothesis test (undone by ``stack``); None for other tests.
    ``audits``: the test's region could audit (CUDA, or a detector that needs none); only then
    is the deadline suspended, so a run that audits nothing keeps the suite's deadlines."""
    obj = getattr(item, "obj", None)
    handle = getattr(obj, "hypothesis", None)
    if not getattr(obj, "is_hypothesis_test", False) or handle is None:
        return None
    original, reports = handle.inner_test, []

    @functools.wraps(original)
    def inner(*args, **kwargs):
        with audit(plan.detectors, races=plan.races, fail_on_phases=plan.fail_on_phase) as rep:
            reports.append(rep)
            result = original(*args, **kwargs)
        inside = [e for e, _ in split(rep.syncs, codescope)[0]]  # outside the code scope:
        failing = dataclasses.replace(rep, syncs=inside)        # shown, never failing
        if plan.mode == "fail" and failing.cuda_available and not failing.clean:
            raise SyncError(failing)  # as forbid() would, for the phases that fail
        return result

    handle.inner_test = inner
    stack.callback(setattr, handle, "inner_test", original)
    # Auditing adds per-example overhead (profiler start/stop): suspend the deadline meanwhile.
    target = getattr(obj, "__func__", obj)
    current = getattr(target, "_hypothesis_internal_use_settings", None)
    if audits and current is not None and current.deadline is not None:
        from hypothesis import settings

        target._hypothesis_internal_use_settings = settings(current, deadline=None)
        stack.callback(setattr, target, "_hypothesis_internal_use_settings", current)
    return reports


def _dedupe(events: list[SyncEvent]) -> list[SyncEvent]:
    return [e for e, _ in group_by_site(events)]


def _sync_errors(exc: BaseException | None) -> list[SyncError]:
    if isinstance(exc, SyncError):
        return [exc]
    return [e for sub in getattr(exc, "exceptions", ()) or () for e in _sync_errors(sub)]


def final_report(outer: RegionReport, exc: BaseException | None,
                 examples: list | None) -> RegionReport:
    """For hypothesis tests list each call site once, from the failing example if any."""
    if examples is None:
        return outer
    failing = [e.report for e in _sync_errors(exc)]
    syncs = [s for r in failing for s in r.syncs] if failing else outer.syncs
    return dataclasses.replace(outer, syncs=_dedupe(syncs), allowed=_dedupe(outer.allowed))
